"""Type stub of the compiled host harness ``unifl.backends.gpu._gpu_host`` (pybind11,
``src/gpu_host.cpp``): the gpu kernel bodies run on the CPU.  Keep it in step with the
``PYBIND11_MODULE(_gpu_host, mod)`` block there.

Every array argument is a C-contiguous native-endian ``uint64`` NumPy array, checked by the harness
(a mismatch raises ValueError naming the argument): ``key`` / ``pub`` / ``owner`` / ``priv`` are
the key blobs of ``keys.py``, operands (N, L) batches, ``exps`` (N|1, Le) or, for ``multi_exp``,
(K, N, Le).  ``mode`` is the kernels' MulMode / ExpMode (``kernel_backend.MONT_MUL`` ...), ``soa``
selects the limb-major layout the device uses, ``group`` the cooperative bodies
(``src/kernels_group.cuh``, lanes emulated in lockstep) over the one-thread ones.  Results are new
(N, L) ``uint64`` arrays.
"""

import numpy as np
import numpy.typing as npt

def lmax_class(L: int, /) -> int:
    """The kernels' limb-capacity class (16, 32, 48, 64, 96 or 128) for L limbs; 0 above 128."""
def blob_fields(key: npt.NDArray[np.uint64], kind: int) -> list[tuple[str, int, int]]:
    """(name, offset, words) of every field of a key blob of ``kind`` as the C++ side walks it
    (the tables of ``src/key_layout.h``); ValueError for a blob that does not fit its table."""

def mul(key: npt.NDArray[np.uint64], a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64], mode: int, soa: bool, threads: int,
        group: bool = False) -> npt.NDArray[np.uint64]: ...
def exp(key: npt.NDArray[np.uint64], base: npt.NDArray[np.uint64], exps: npt.NDArray[np.uint64], mode: int, soa: bool, threads: int,
        group: bool = False, window: int = 4, wide: bool = False, converged: bool = False) -> npt.NDArray[np.uint64]:
    """``window``: the cooperative bodies' exponent window (3, 4, 5); ``wide``: their wide shape
    (twice the lanes, up to 4096-bit moduli); ``converged``: their converged-warp exponent schedule
    (the longest digit count of the call, a multiplication at every digit)."""
def multi_exp(key: npt.NDArray[np.uint64], bases: npt.NDArray[np.uint64], exps: npt.NDArray[np.uint64], soa: bool, threads: int, group: bool = False,
              chunk: int = 1, window: int = 4) -> npt.NDArray[np.uint64]:
    """``chunk``: columns per group of the cooperative one-launch reduction."""
def paillier_encrypt(pub: npt.NDArray[np.uint64], m: npt.NDArray[np.uint64], r: npt.NDArray[np.uint64], soa: bool, threads: int,
                     group: bool = False, window: int = 4, wide: bool = False) -> npt.NDArray[np.uint64]: ...
def paillier_encrypt_owner(owner: npt.NDArray[np.uint64], m: npt.NDArray[np.uint64], yp: npt.NDArray[np.uint64], yq: npt.NDArray[np.uint64], soa: bool, threads: int,
                           group: bool = False, window: int = 4) -> npt.NDArray[np.uint64]: ...
def paillier_decrypt(priv: npt.NDArray[np.uint64], c: npt.NDArray[np.uint64], soa: bool, threads: int, group: bool = False,
                     window: int = 4) -> npt.NDArray[np.uint64]:
    """An element whose CRT half degenerates comes back as the all-ones row (as on the device)."""
def prod_groups(key: npt.NDArray[np.uint64], a: npt.NDArray[np.uint64], order: npt.NDArray[np.int64], plan: npt.NDArray[np.int64],
                num_groups: int, soa: bool, threads: int) -> npt.NDArray[np.uint64]:
    """``order``/``plan``: see ``kernel_backend.group_plan``."""
def inverse(key: npt.NDArray[np.uint64], a: npt.NDArray[np.uint64], chunk: int, soa: bool, threads: int) -> tuple[npt.NDArray[np.uint64], int]:
    """(x^-1·R rows, number of chunks with a non-invertible row)."""
def fixed_base(pub: npt.NDArray[np.uint64], table: npt.NDArray[np.uint64], w: int, m: npt.NDArray[np.uint64], a: npt.NDArray[np.uint64], soa: bool, threads: int) -> npt.NDArray[np.uint64]:
    """``table`` (nwin, 2^w − 1, L2): the comb table of ``keys.comb_table``."""
def owner_fixed_base(owner: npt.NDArray[np.uint64], tp: npt.NDArray[np.uint64], tq: npt.NDArray[np.uint64], w: int, m: npt.NDArray[np.uint64], ap: npt.NDArray[np.uint64],
                     aq: npt.NDArray[np.uint64], soa: bool, threads: int) -> npt.NDArray[np.uint64]:
    """``tp``, ``tq`` (nwin, 2^w − 1, Lp2 | Lq2): comb tables of one base mod p² and mod q²; ``ap``,
    ``aq`` (n, La): the exponent of each half (the same for DJN)."""
