"""Type stub of the compiled extension ``unifl.backends.native._native`` (pybind11, ``src/native.cpp``):
what Python uses of it.  Keep it in step with the ``PYBIND11_MODULE(_native, mod)`` block there.

Every array argument is a NumPy array (pybind11 ``py::array``) that the extension checks itself:
limb batches and exponents are C-contiguous native-endian ``uint64`` (N, L) / (N|1, Le) /
(K, N, Le) arrays, group ids ``int64`` (N,), and a mismatch raises ValueError naming the argument.
The functions take their arguments by position only (no ``py::arg`` names).  Results are new
C-contiguous ``uint64`` arrays.
"""

import numpy as np
import numpy.typing as npt

#: True when the BIGNUM layout self-check passed and limbs are copied straight into OpenSSL's words
direct_limb_transfer: bool

def hardware_threads() -> int:
    """The default worker count: one per hardware thread."""

class Modulus:
    """An odd modulus m > 2 of 1..256 limbs and its OpenSSL Montgomery context (BN_MONT_CTX)."""

    def __init__(self, m: npt.NDArray[np.uint64], /) -> None: ...

def mont_mul(M: Modulus, a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64], threads: int, /
             ) -> npt.NDArray[np.uint64]: ...
def mod_mul(M: Modulus, a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64], threads: int, /
            ) -> npt.NDArray[np.uint64]: ...
def mod_exp(M: Modulus, base: npt.NDArray[np.uint64], exps: npt.NDArray[np.uint64], threads: int, /
            ) -> npt.NDArray[np.uint64]: ...
def mont_exp(M: Modulus, base: npt.NDArray[np.uint64], exps: npt.NDArray[np.uint64], threads: int,
             /) -> npt.NDArray[np.uint64]: ...
def mod_exp_secret(M: Modulus, base: npt.NDArray[np.uint64], exps: npt.NDArray[np.uint64],
                   threads: int, /) -> npt.NDArray[np.uint64]: ...
def mont_multi_exp(M: Modulus, bases: npt.NDArray[np.uint64], exps: npt.NDArray[np.uint64],
                   threads: int, /) -> npt.NDArray[np.uint64]: ...
def mont_prod_groups(M: Modulus, a: npt.NDArray[np.uint64], groups: npt.NDArray[np.int64],
                     num_groups: int, threads: int, /) -> npt.NDArray[np.uint64]: ...
def mont_inverse(M: Modulus, a: npt.NDArray[np.uint64], threads: int, /
                 ) -> npt.NDArray[np.uint64]: ...

class PaillierPublic:
    """A Paillier public key: the Montgomery context of n² and n's limbs; optionally the DJN comb
    table of a fixed base (``set_fixed_base``)."""

    def __init__(self, nsq: Modulus, n: npt.NDArray[np.uint64], /) -> None: ...
    def encrypt(self, m: npt.NDArray[np.uint64], r: npt.NDArray[np.uint64], threads: int, /
                ) -> npt.NDArray[np.uint64]: ...
    def set_fixed_base(self, hs_mont: npt.NDArray[np.uint64], exp_bits: int, window: int,
                       threads: int, /) -> None: ...
    def encrypt_fixed_base(self, m: npt.NDArray[np.uint64], a: npt.NDArray[np.uint64],
                           threads: int, /) -> npt.NDArray[np.uint64]: ...

class PaillierPrivate:
    """A Paillier private key: its public object, the contexts of p² and q² and the CRT constants
    (p, q, h_p, h_q, q^-1 mod p as one-dimensional limb arrays); optionally the owner's combs of a
    fixed base mod p² and q² (``set_fixed_base``) and of the owner's generators
    (``set_generators``)."""

    def __init__(self, pub: PaillierPublic, psq: Modulus, qsq: Modulus, p: npt.NDArray[np.uint64],
                 q: npt.NDArray[np.uint64], hp: npt.NDArray[np.uint64],
                 hq: npt.NDArray[np.uint64], qinv: npt.NDArray[np.uint64], /) -> None: ...
    def decrypt(self, c_mont: npt.NDArray[np.uint64], threads: int, /) -> npt.NDArray[np.uint64]:
        """Raises InvalidCiphertextError (``unifl.core.errors``) naming the first non-unit."""
    def encrypt_owner(self, m: npt.NDArray[np.uint64], yp: npt.NDArray[np.uint64],
                      yq: npt.NDArray[np.uint64], threads: int, /) -> npt.NDArray[np.uint64]: ...
    def set_fixed_base(self, hs_mont: npt.NDArray[np.uint64], exp_bits: int, window: int,
                       threads: int, /) -> None: ...
    def encrypt_owner_fixed_base(self, m: npt.NDArray[np.uint64], a: npt.NDArray[np.uint64],
                                 threads: int, /) -> npt.NDArray[np.uint64]: ...
    def set_generators(self, gp_mont: npt.NDArray[np.uint64], gq_mont: npt.NDArray[np.uint64],
                       window: int, threads: int, /) -> None: ...
    def encrypt_owner_generator(self, m: npt.NDArray[np.uint64], kp: npt.NDArray[np.uint64],
                                kq: npt.NDArray[np.uint64], threads: int, /
                                ) -> npt.NDArray[np.uint64]: ...
