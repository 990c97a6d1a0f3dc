"""Encryption and decryption of limb batches under key objects: the one router every SDK caller
(raw API, ``CiphertextBatch``, ``EncryptedArray``, the FATE kit) goes through.

Encryption takes, in this order: an explicit r; the factors of the key's pool on this backend
(:mod:`._pool`, one MontMult per element, and a batch larger than the pool takes what is there and
computes the rest); a fresh factor (:mod:`._obfuscation`: fixed base, key owner's CRT, or r^n).
"""

from __future__ import annotations

import numpy as np

from ...core.backend import Backend
from ...core.contract import Limbs
from ...core.errors import KeyMismatchError
from ._fused import paillier_decrypt
from ._obfuscation import encrypt_fresh
from ._pool import PrivateKeyLike, PublicKeyLike, encrypt_pooled, existing_pool

__all__ = ["encrypt_limbs", "decrypt_limbs"]


def encrypt_limbs(backend: Backend, pk: PublicKeyLike, m: np.ndarray, r: np.ndarray | None = None,
                  use_pool: bool = True, private_key: PrivateKeyLike | None = None) -> Limbs:
    """Encrypt raw plaintext limbs (N, Ln), each in [0, n), to Montgomery-form ciphertexts (N, L2).

    Order of preference: explicit ``r``; the key's pool on ``backend`` (``use_pool``); the
    fixed-base variant when enabled; fresh obfuscation.  The key owner (``private_key`` given)
    computes every fresh obfuscation factor with the CRT, mod p² and mod q²; its ciphertexts are
    those of the public-key path for the same r (or the same fixed-base exponents a).

    Raises:
        KeyMismatchError: ``private_key`` is not the key of ``pk``.
    """
    rec = pk.material
    ctx = rec.nsquare_ctx
    count = m.shape[0]
    owner = private_key.material if private_key is not None else None
    if owner is not None and owner.public_key.n != rec.n:
        raise KeyMismatchError("private_key does not belong to the public key")
    if count == 0:
        return np.empty((0, ctx.num_limbs), np.uint64)
    if r is None and use_pool:
        pool = existing_pool(backend, pk)
        if pool is not None:
            factors, k = pool.take(count)
            if k == count:
                return encrypt_pooled(backend, rec, m, factors)
            if k:
                head = encrypt_pooled(backend, rec, m[:k], factors)
                tail = encrypt_fresh(backend, rec, m[k:], owner=owner)
                return np.concatenate([np.asarray(head), np.asarray(tail)])
    return encrypt_fresh(backend, rec, m, r=r, owner=owner)


def decrypt_limbs(backend: Backend, sk: PrivateKeyLike, c_mont: Limbs) -> Limbs:
    """Decrypt Montgomery-form ciphertexts (N, L2) to plaintext limbs (N, Ln) with the CRT
    (:func:`~unifl.phe_sdk.paillier.paillier_decrypt`)."""
    rec = sk.material
    if c_mont.shape[0] == 0:
        return np.empty((0, rec.public_key.n_ctx.num_limbs), np.uint64)
    return paillier_decrypt(backend, rec, c_mont)
