"""Keys and moduli the tests share, cached per process (key generation is the slow part)."""

from __future__ import annotations

import functools
import os
import secrets

import unifl
import unifl.phe_sdk.rsa

#: UNIFL_FULL=1 (make test-full): the full equivalence vectors
FULL = os.environ.get("UNIFL_FULL") == "1"


def random_odd_modulus(bits: int) -> int:
    return secrets.randbits(bits) | (1 << (bits - 1)) | 1


@functools.lru_cache(maxsize=None)
def paillier_keypair(bits: int):
    return unifl.keygen(bits)


@functools.lru_cache(maxsize=None)
def rsa_keypair(bits: int):
    return unifl.phe_sdk.rsa.keygen(bits)
