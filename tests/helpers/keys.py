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


@functools.lru_cache(maxsize=None)
def paillier_keypair_without_generators(bits: int):
    """A key pair from primes drawn without regard to p − 1 (as keys made elsewhere are), whose
    owner therefore has no proven generators and obfuscates by y^p mod p² (redrawn in the rare
    case that both p − 1 and q − 1 factor)."""
    from unifl.phe_sdk.paillier import PrivateKey
    from unifl.phe_sdk.primes import random_prime
    while True:
        sk = PrivateKey(random_prime(bits // 2), random_prime(bits // 2))
        if sk.generators is None and sk.public_key.bits == bits:
            return sk.public_key, sk
