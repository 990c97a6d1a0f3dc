"""The codec's private-key guard against smuggling: a message that carries a watched private key's
secret values (p, q, λ, μ, d, ...) in any form the guard's rules name is refused, whatever wraps it
(unifl.phe_sdk.exposure states the rules; these tests play each form, and the documented limits
show exactly what passes and nothing more)."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unifl.app import codec
from unifl.core.errors import PrivateKeyExposure
from unifl.phe_sdk import EncryptedArray, exposure, paillier, rsa, serialize

import unifl

BE = unifl.backend("cpu")


@pytest.fixture(scope="module")
def keys():
    pk, sk = paillier.keygen(1024)
    rpk, rsk = rsa.keygen(1024)
    return pk, sk, rpk, rsk


def _be(x: int) -> bytes:
    return x.to_bytes((x.bit_length() + 7) // 8, "big")


def _le(x: int) -> bytes:
    return x.to_bytes((x.bit_length() + 7) // 8, "little")


def _limbs(x: int, bits: int) -> list[int]:
    out = []
    while x:
        out.append(x & ((1 << bits) - 1))
        x >>= bits
    return out


def smuggled(pk, sk, rpk, rsk) -> dict:
    p, q, n = sk.p, sk.q, pk.n
    lam = (p - 1) * (q - 1) // math.gcd(p - 1, q - 1)
    mu = pow(lam, -1, n)
    text = serialize.key_to_json(sk)
    cut = text.index("paillier.private") + 5
    hx = format(p, "x")
    return {
        # the three forms that passed the marker-based guard
        "kind marker cut across two strings": {"a": text[:cut], "b": text[cut:]},
        "key JSON as a uint8 array": np.frombuffer(text.encode(), np.uint8),
        "a mapping of n and p only": {"n": format(n, "x"), "p": hx},
        # the numbers themselves, however encoded
        "p as an int": {"x": p},
        "q as a negative int": [-q],
        "lambda as an int": lam,
        "mu as an int": mu,
        "3p (a multiple of p)": 3 * p,
        "p times n squared": p * n * n,
        "a multiple of p-1": 5 * (p - 1),
        "p shifted by 3 bits": p << 3,
        "h_p (CRT constant)": sk.hp,
        "p decimal": str(p),
        "p hex upper with 0x": "0x" + hx.upper(),
        "p hex inside other text": "note: " + hx + " end",
        "p big-endian bytes": _be(p),
        "p little-endian bytes": _le(p),
        "p bytes at an odd offset in a blob": b"\x01\x02\x03" + _be(p) + b"\xff" * 5,
        "p as uint64 limbs, least significant first": np.array(_limbs(p, 64), np.uint64),
        "p as uint64 limbs, most significant first": np.array(_limbs(p, 64)[::-1], np.uint64),
        "p as uint32 words, most significant first": np.array(_limbs(p, 32)[::-1], np.uint32),
        "p as a uint8 array": np.frombuffer(_be(p), np.uint8),
        "p as a list of byte values": list(_be(p)),
        "p as a list of 64-bit ints": _limbs(p, 64),
        "p split into two ints in two fields": {"hi": p >> 256, "lo": p & ((1 << 256) - 1)},
        "p split into two byte fields": (_be(p)[:30], _be(p)[30:]),
        "p split into two hex strings": [hx[:60], hx[60:]],
        "p base64 of its bytes": base64.b64encode(_be(p)).decode(),
        "key JSON base64": base64.b64encode(text.encode()),
        "key JSON base64 url-safe in a longer text": "x" + base64.urlsafe_b64encode(
            b"ab" + text.encode()).decode(),
        "p as JSON unicode escapes": json.dumps({"v": "".join(f"\\u{ord(c):04x}" for c in hx)}
                                                ).replace("\\\\", "\\"),
        # RSA (the PSI host's key)
        "RSA d as an int": rsk.d,
        "RSA d + lambda": rsk.d + (rsk.p - 1) * (rsk.q - 1),
        "RSA dp as hex": format(rsk.dp, "x"),
        "RSA p as limbs in a 2-D array": np.array([_limbs(rsk.p, 64)], np.uint64),
        "RSA private key JSON cut in three": [serialize.key_to_json(rsk)[i:i + 100]
                                               for i in range(0, 1000, 100)],
    }




def _cases():
    pk, sk = paillier.keygen(1024)
    rpk, rsk = rsa.keygen(1024)
    return list(smuggled(pk, sk, rpk, rsk))


@pytest.mark.parametrize("case", _cases())
def test_a_watched_private_key_in_any_named_form_is_refused(keys, case):
    msg = smuggled(*keys)[case]
    with pytest.raises(PrivateKeyExposure):
        codec.encode(msg)
    with pytest.raises(PrivateKeyExposure):            # however deep it sits
        codec.encode({"outer": [1, ("x", {"inner": msg})]})


def test_honest_messages_pass(keys):
    """Public keys, n and its powers, ciphertexts, signatures, random numbers and text of the same
    sizes, and the key JSON of a key this process does not hold."""
    pk, sk, rpk, rsk = keys
    rng = np.random.default_rng(1)
    ct = EncryptedArray.encrypt(pk, [1, 2, 3], backend=BE)
    other = serialize.key_to_json(paillier.keygen(1024)[0])
    honest = {"pk": pk, "rsa": rpk, "n": pk.n, "n2": pk.n ** 2, "n-1": pk.n - 1, "ct": ct,
              "sig": rsk.sign([12345, 67890]), "rand": rng.integers(0, 2**63, 5000, np.uint64),
              "hex": format(int.from_bytes(rng.bytes(512), "big"), "x"),
              "dec": str(int.from_bytes(rng.bytes(512), "big")), "pk json": other,
              "ints": [int.from_bytes(rng.bytes(128), "big") for _ in range(50)],
              "b64": base64.b64encode(rng.bytes(4096)).decode()}
    back = codec.decode(codec.encode(honest), {codec.fingerprint16(pk): pk}.get)
    assert back["n"] == pk.n and back["pk"] == pk


def _pieces_apart(b: bytes, size: int) -> bytes:
    """``b`` in pieces of ``size`` bytes, each followed by a byte equal to neither the piece's last
    byte nor the next piece's first (so no window of ``b`` spans two pieces)."""
    out = bytearray()
    for i in range(0, len(b), size):
        piece = b[i:i + size]
        nxt = b[i + size] if i + size < len(b) else None
        out += piece
        out.append(next(x for x in range(256) if x not in (piece[-1], nxt)))
    return bytes(out)


def test_documented_limits_pass_and_nothing_more(keys):
    """What the guard does not find, exactly as unifl.phe_sdk.exposure states it: pieces shorter
    than the windows, each in its own field, and transforms it does not know (here XOR with a pad
    sent alongside).  One byte more per piece, or the pad left out of the transform, is found."""
    pk, sk, rpk, rsk = keys
    b = _be(sk.p)
    # 56-bit pieces: not found (documented).  Each piece is followed by a byte that continues
    # neither it nor the next piece: in a codec message the byte beside a piece is a header byte,
    # which equals p's neighbouring byte by chance (1 in 256 per side, so about one key in twelve),
    # and then the window is whole and rightly found.
    assert not exposure.bytes_reveal(_pieces_apart(b, 7))
    assert exposure.bytes_reveal(_pieces_apart(b, 8))
    eights = {f"f{i}": b[i:i + 8] for i in range(0, len(b), 8)}
    with pytest.raises(PrivateKeyExposure):
        codec.encode(eights)
    hx = format(sk.p, "x")
    codec.encode({f"h{i}": hx[i:i + 15] for i in range(0, len(hx), 15)})   # 15 characters
    with pytest.raises(PrivateKeyExposure):
        codec.encode({f"h{i}": hx[i:i + 16] for i in range(0, len(hx), 16)})
    pad = np.random.default_rng(2).bytes(len(b))
    codec.encode({"x": bytes(u ^ v for u, v in zip(b, pad)), "pad": pad})   # a transform
    with pytest.raises(PrivateKeyExposure):
        codec.encode({"x": bytes(u ^ v for u, v in zip(b, bytes(len(b)))), "pad": pad})


def test_a_collected_key_is_no_longer_watched():
    import gc
    pk, sk = paillier.keygen(1024)
    p = sk.p
    with pytest.raises(PrivateKeyExposure):
        codec.encode(p)
    del sk
    gc.collect()
    codec.encode(p)            # a number no live key of this process has as a secret


def test_a_key_collected_while_the_guard_holds_its_lock_does_not_stop_the_process(monkeypatch):
    """A key's finalizer runs wherever the garbage collector does, which can be inside the guard's
    own locked region on the same thread (any allocation there may start a collection).  It used
    to take the guard's lock there and wait on itself: a party stalled inside ``codec.encode``.
    Here the collection runs at the one allocation under the lock that every check makes."""
    import gc
    import threading

    class CollectingDict(dict):
        def values(self):
            gc.collect()
            return super().values()

    monkeypatch.setattr(exposure, "_lock", threading.Lock())   # a stuck thread keeps only this
    monkeypatch.setattr(exposure, "_watched", CollectingDict())
    gc.disable()          # the key dies in the guard's locked region, not at some earlier collection
    try:
        _, sk = paillier.keygen(1024)
        p = sk.p
        cycle: list = [sk]
        cycle.append(cycle)           # only the cycle collector frees it
        del sk, cycle
        done = threading.Event()
        checker = threading.Thread(target=lambda: (exposure.int_reveals(12345), done.set()),
                                   daemon=True)
        checker.start()
        assert done.wait(30), "the guard waited on its own lock"
    finally:
        gc.enable()
    assert not exposure.int_reveals(p)       # and the collected key is no longer watched


def test_the_private_key_path_still_carries_the_key(keys):
    _, sk, _, rsk = keys
    for key in (sk, rsk):
        data = codec.encode_private_key(key)
        assert codec.decode(data, allow_private_key=True) == key or key is rsk


def _direct_scan(data: bytes) -> bool:
    """Rules 2 and 3 read directly off the guard's own windows: the 8 bytes at every offset
    against the binary windows, and a text prefix there plus the 8 bytes after it against the
    text windows.  What :func:`exposure.bytes_reveal` computes, without its screens and steps."""
    tables = exposure._current_tables()
    assert tables is not None
    binary, firsts, pairs = (set(t.tolist()) for t in tables[:3])

    def word(i: int) -> int:
        return int.from_bytes(data[i:i + exposure.WINDOW], "little")

    for i in range(len(data) - exposure.WINDOW + 1):
        w = word(i)
        if w in binary:
            return True
        if w in firsts and i + exposure.TEXT_WINDOW <= len(data):
            h = int(exposure._pair_hash(np.array([w], np.uint64),
                                        np.array([word(i + 8)], np.uint64))[0])
            if h in pairs:
                return True
    return False


@pytest.mark.parametrize("step", [None, 8, 13])
def test_a_window_is_found_at_every_offset_and_across_the_scan_s_steps(keys, monkeypatch, step):
    """The scan reads the 64-bit word at every byte offset in steps of ``exposure._CHUNK``
    offsets (here also 8 and 13, so that windows straddle the steps, and steps end off the
    8-offset groups the screen is read in): a binary or text window of p is found wherever it
    sits, up to the last byte, and the same bytes without it pass."""
    if step is not None:
        monkeypatch.setattr(exposure, "_CHUNK", step)
    p = keys[1].p
    rng = np.random.default_rng(5)
    # 8 bytes of p, and 16 of its hex digits: each a whole window, cut from a longer form
    for form, lo, hi in ((_be(p), 40, 48), (format(p, "x").encode(), 20, 36)):
        piece = form[lo:hi]
        for size in (len(piece), 61, 64):
            filler = rng.bytes(size)
            assert not exposure.bytes_reveal(filler)
            for at in range(size - len(piece) + 1):
                planted = filler[:at] + piece + filler[at + len(piece):]
                assert exposure.bytes_reveal(planted), (len(piece), size, at)
                # one byte short, between bytes that do not continue it (a neighbour equal to
                # the form's next byte would make the window whole again, and rightly found)
                short = bytearray(filler[:at] + piece[1:] + filler[at + len(piece):])
                for i, continues in ((at - 1, form[lo]), (at + len(piece) - 1, form[hi])):
                    if 0 <= i < len(short) and short[i] == continues:
                        short[i] ^= 1
                assert not exposure.bytes_reveal(bytes(short)), (len(piece), size, at)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_scan_agrees_with_the_rules_read_directly(keys, data):
    """Random bytes with pieces of p's and λ's binary and text forms planted at random offsets,
    some cut short: the screened scan's verdict is the direct reading's, at any step size."""
    _, sk, _, rsk = keys
    forms = [_be(sk.p), _le(sk.q), format(sk.p, "x").encode(), str(rsk.dp).encode(),
             _le((sk.p - 1) * (sk.q - 1))]
    blob = bytearray(data.draw(st.binary(min_size=0, max_size=300), "filler"))
    for _ in range(data.draw(st.integers(0, 3), "pieces")):
        form = data.draw(st.sampled_from(forms), "form")
        size = data.draw(st.integers(5, 20), "size")
        at = data.draw(st.integers(0, max(0, len(form) - size)), "from")
        where = data.draw(st.integers(0, len(blob)), "where")
        blob[where:where] = form[at:at + size]
    step = data.draw(st.sampled_from([exposure._CHUNK, 1, 7, 8, 64]), "step")
    old = exposure._CHUNK
    exposure._CHUNK = step
    try:
        assert exposure.bytes_reveal(bytes(blob)) == _direct_scan(bytes(blob))
    finally:
        exposure._CHUNK = old
