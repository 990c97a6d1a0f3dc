"""The nine cryptographic operations of FL (FLASH §3.1, O1–O9) as first-class SDK calls.

=====  ===========================================  ===========================================
O1     Paillier encryption                          :func:`encrypt`
O2     Paillier decryption                          :func:`decrypt`
O3     ciphertext matrix addition                   :func:`add`
O4     ciphertext × cleartext, element-wise         :func:`mul`
O5     ciphertext × cleartext matrix multiplication :func:`matmul`
O6     histogram building (SecureBoost)             :func:`histogram`
O7     RSA encryption / decryption (signing)        :func:`rsa_encrypt`, :func:`rsa_decrypt`
O8     RSA blinding                                 :func:`rsa_blind`
O9     RSA unblinding                               :func:`rsa_unblind`
=====  ===========================================  ===========================================
"""

from __future__ import annotations

from typing import Any, Sequence, overload

import numpy as np
import numpy.typing as npt

from ..core.backend import Backend
from . import paillier, rsa
from .array import EncryptedArray, histogram

__all__ = ["encrypt", "decrypt", "add", "mul", "matmul", "histogram", "rsa_encrypt",
           "rsa_decrypt", "rsa_blind", "rsa_unblind"]


def encrypt(public_key: paillier.PublicKey, values: npt.ArrayLike, scale_bits: int | None = None,
            backend: Backend | str | None = None) -> EncryptedArray:
    """O1: E(values) as an EncryptedArray."""
    return EncryptedArray.encrypt(public_key, values, scale_bits, backend)


def decrypt(private_key: paillier.PrivateKey, array: EncryptedArray) -> np.ndarray:
    """O2: the plaintext array."""
    return array.decrypt(private_key)


def add(a: EncryptedArray, b: EncryptedArray | npt.ArrayLike) -> EncryptedArray:
    """O3: E(a) ⊕ E(b) (or ⊕ a plaintext)."""
    return a + b


def mul(a: EncryptedArray, k: npt.ArrayLike) -> EncryptedArray:
    """O4: E(a) ⊗ k element-wise (with broadcasting)."""
    return a * k


@overload
def matmul(x: EncryptedArray, y: npt.ArrayLike) -> EncryptedArray: ...
@overload
def matmul(x: npt.ArrayLike, y: EncryptedArray) -> EncryptedArray: ...


def matmul(x: Any, y: Any) -> EncryptedArray:
    """O5: X ⊗ E(y) or E(y) ⊗ X for a plaintext matrix X (multi-exponentiation)."""
    # (the overloads type the two calls; here Python's own dispatch of ``@`` picks the side: a
    # plaintext left operand defers to EncryptedArray.__rmatmul__)
    return x @ y


def rsa_encrypt(public_key: rsa.PublicKey, values: Sequence[int],
                backend: Backend | str | None = None) -> list[int]:
    """O7 (public direction): x^e mod n."""
    return public_key.raw_encrypt(values, backend)


def rsa_decrypt(private_key: rsa.PrivateKey, values: Sequence[int],
                backend: Backend | str | None = None) -> list[int]:
    """O7 (private direction, CRT): y^d mod n."""
    return private_key.raw_decrypt(values, backend)


def rsa_blind(public_key: rsa.PublicKey, values: Sequence[int],
              backend: Backend | str | None = None) -> tuple[list[int], list[int]]:
    """O8: (x·r^e mod n, r)."""
    return public_key.blind(values, backend)


def rsa_unblind(public_key: rsa.PublicKey, signed: Sequence[int], r_values: Sequence[int],
                backend: Backend | str | None = None) -> list[int]:
    """O9: s·r^-1 mod n."""
    return public_key.unblind(signed, r_values, backend)
