"""Fuzz ``unifl.phe_sdk.serialize.key_from_json``: the key JSON parser (a peer's public key, a key
file a user points at).

The input is the JSON text itself (bytes, so invalid UTF-8 is fuzzed too).  Parsing a key runs
primality tests on its numbers, so inputs are bounded (``-max_len=4096``: at most ~16,000-bit
numbers) to keep every input fast; the parser's own size cap must refuse anything larger before
testing it.  Seeds: the fixed 1024-bit test keys (Paillier and RSA, public and private) and a few
near-misses.  Expected outcomes: a key object, or a UniflError subclass.
"""

from __future__ import annotations

import json

import atheris

with atheris.instrument_imports(include=["unifl"]):  # coverage feedback from UniFL
    import _common
    from unifl.phe_sdk import paillier, rsa, serialize

KEY_TYPES = (paillier.PublicKey, paillier.PrivateKey, rsa.PublicKey, rsa.PrivateKey)


def test_one(data: bytes) -> None:
    try:
        key = serialize.key_from_json(data)
    except _common.EXPECTED:
        return
    if not isinstance(key, KEY_TYPES):
        raise AssertionError(f"key_from_json returned a {type(key).__name__}")


def seeds() -> list[bytes]:
    ppk, psk = _common.paillier_keys()
    rpk, rsk = _common.rsa_keys()
    out = [serialize.key_to_json(k).encode() for k in (ppk, psk, rpk, rsk)]
    base = json.loads(out[0])
    out += [json.dumps({**base, "unifl": 2}).encode(), json.dumps({**base, "kind": "x"}).encode(),
            json.dumps({**base, "n": format(_common.P, "x")}).encode(),          # a prime n
            json.dumps({"unifl": 1, "kind": "rsa.public", "n": base["n"], "e": "3"}).encode(),
            b"[]", b"{}", b'{"unifl": 1}',
            # regression: nesting past the recursion limit (RecursionError, fixed in serialize.py)
            b'{"unifl": 1, "kind": ' + b"[" * 1100]
    return out


if __name__ == "__main__":
    _common.main(test_one, seeds, default_flags=["-max_len=4096"])
