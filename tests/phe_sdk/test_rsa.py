"""RSA blind signatures (O7-O9) and key serialization."""

from __future__ import annotations

import pytest

import unifl
from unifl.phe_sdk import serialize

from tests.helpers.keys import paillier_keypair, rsa_keypair


@pytest.mark.parametrize("name", ["cpu", "native"])
def test_rsa_blind_signature_round_trip(name):
    pk, sk = rsa_keypair(1024)
    h = unifl.phe_sdk.rsa.full_domain_hash(["alice", "bob", b"\x00carol", ""], pk.n)
    assert len(set(h)) == 4 and all(0 <= v < pk.n for v in h)
    blinded, r = pk.blind(h, backend=name)
    assert blinded != h
    signed = sk.raw_decrypt(blinded, backend=name)
    sig = pk.unblind(signed, r, backend=name)
    assert sig == [pow(v, sk.d, pk.n) for v in h]
    assert pk.raw_encrypt(sig, backend=name) == h
    # O7: encryption then decryption is the identity
    assert sk.raw_decrypt(pk.raw_encrypt(h, backend=name), backend=name) == h


def test_rsa_keygen_defaults():
    assert unifl.phe_sdk.rsa.DEFAULT_KEY_BITS == 2048
    pk, sk = rsa_keypair(1024)
    assert pk.e == 65537 and pk.n.bit_length() == 1024
    assert str(sk.p) not in repr(sk)


def test_key_json_round_trip():
    pk, sk = paillier_keypair(1024)
    rpk, rsk = rsa_keypair(1024)
    for key in (pk, sk, rpk):
        assert serialize.key_from_json(serialize.key_to_json(key)) == key
    back = serialize.key_from_json(serialize.key_to_json(rsk))
    assert (back.p, back.q, back.e) == (rsk.p, rsk.q, rsk.e)


