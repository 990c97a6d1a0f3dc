"""Hostile-peer tests for ciphertext and key ingress in the SDK (phe_sdk, codec, FATE kit).

Each test plays the deviating party: it crafts the frame, key, shape or fault a malicious peer (or a
faulty device) would produce, and checks that the honest party refuses it with a typed error before
anything leaks.  Keys are 1024 bits (the minimum) and data small, so every test runs in seconds.
"""

from __future__ import annotations

import math
import secrets
import struct
import zlib

import gmpy2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import unifl
from unifl import base_op, mod_op
from unifl.app import codec
from unifl.core import registry
from unifl.core.errors import (InvalidCiphertextError, OperandError, SerializationError, SignatureError,
                          WeakKeyError)
from unifl.phe_sdk import paillier, rsa, serialize
from unifl.phe_sdk.array import EncryptedArray

from tests.helpers.keys import paillier_keypair, rsa_keypair

AVAILABLE = [n for n in registry.names() if registry.probe(n).available]


@pytest.fixture(scope="module")
def keys():
    return paillier_keypair(1024)


@pytest.fixture(scope="module")
def rsa_keys():
    return rsa_keypair(1024)


def _nonunit(sk: paillier.PrivateKey, factor: str) -> int:
    """A value in [1, n²) sharing ``factor`` (p, q or n) with n: what a hostile peer sends."""
    f = {"p": sk.p, "q": sk.q, "n": sk.public_key.n}[factor]
    nsq = sk.public_key.nsquare
    while True:
        c = f * (1 + secrets.randbelow(nsq // f - 1))
        if 0 < c < nsq:
            return c


def _hostile_array(pk: paillier.PublicKey, values: list[int], be="cpu") -> EncryptedArray:
    """An EncryptedArray holding arbitrary values: the attacker runs their own copy of the SDK,
    whose constructor trusts its caller, and serialises it with the ordinary encoder."""
    ctx = pk.nsquare_ctx
    be = unifl.backend(be)
    return EncryptedArray(pk, base_op.to_mont(be, ctx, ctx.to_limbs(values)), (len(values),), 0,
                          1, be)


def _leaks_factor(sk: paillier.PrivateKey, c: int) -> bool:
    """The premise of the attacks below: c shares a factor with n, so gcd(c, n) alone names p or q
    to whoever can make the key owner's CRT decryption process it."""
    return math.gcd(c, sk.public_key.n) != 1


# ----------------------------------------------------------------------- first line
@pytest.mark.parametrize("factor", ["p", "q", "n"])
def test_frame_with_nonunit_refused_by_serialize(keys, factor):
    pk, sk = keys
    honest = [c for c in pk.raw_encrypt([1, 2, 3])]
    bad = _nonunit(sk, factor)
    assert _leaks_factor(sk, bad)
    frame = serialize.array_to_bytes(_hostile_array(pk, honest[:2] + [bad] + honest[2:]))
    with pytest.raises(InvalidCiphertextError, match="#2 is not a unit"):
        serialize.array_from_bytes(frame, pk)
    # the honest frame still parses, bit-identically
    ok = serialize.array_from_bytes(serialize.array_to_bytes(_hostile_array(pk, honest)), pk)
    assert ok.ciphertexts() == honest


@pytest.mark.parametrize("factor", ["p", "q", "n"])
def test_message_with_nonunit_refused_by_codec(keys, factor):
    """The same value inside an ordinary party message (codec 'E' tag), e.g. the masked gradient
    a guest sends to the key owner's ``decrypt_masked``."""
    pk, sk = keys
    bad = _nonunit(sk, factor)
    msg = codec.encode({"step": 3, "masked": _hostile_array(pk, [bad, pk.raw_encrypt([5])[0]])})
    lookup = {codec.fingerprint16(pk): pk}.get
    with pytest.raises(InvalidCiphertextError, match="#0"):
        codec.decode(msg, lookup)


@pytest.mark.parametrize("factor", ["p", "q", "n"])
def test_raw_decrypt_refuses_nonunit(keys, factor):
    pk, sk = keys
    with pytest.raises(InvalidCiphertextError, match="#1 is not a unit"):
        sk.raw_decrypt([pk.raw_encrypt([7])[0], _nonunit(sk, factor)], backend="cpu")
    with pytest.raises(InvalidCiphertextError, match="outside"):
        sk.raw_decrypt([0], backend="cpu")
    with pytest.raises(InvalidCiphertextError, match="outside"):
        pk.ciphertext_limbs([pk.nsquare])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=1, max_value=12), st.data())
def test_units_accepted_multiples_refused(keys, count, data):
    """Property: random units mod n² always pass; inserting one multiple of p or q anywhere is
    refused, naming its index, whether given as ints or as plain limbs."""
    pk, sk = keys
    seed = data.draw(st.integers(min_value=0, max_value=2**64 - 1))
    rng = np.random.default_rng(seed)
    units = []
    while len(units) < count:
        c = int.from_bytes(rng.bytes(pk.nsquare_ctx.num_limbs * 8), "little") % pk.nsquare
        if c and math.gcd(c, pk.n) == 1:
            units.append(c)
    pk.check_ciphertexts(units)
    pk.check_ciphertexts(pk.nsquare_ctx.to_limbs(units))
    idx = data.draw(st.integers(min_value=0, max_value=count))
    prime = data.draw(st.sampled_from([sk.p, sk.q]))
    k = data.draw(st.integers(min_value=1, max_value=pk.nsquare // prime - 1))
    hostile = units[:idx] + [k * prime] + units[idx:]
    with pytest.raises(InvalidCiphertextError, match=f"#{idx} "):
        pk.check_ciphertexts(hostile)
    with pytest.raises(InvalidCiphertextError, match=f"#{idx} "):
        pk.check_ciphertexts(pk.nsquare_ctx.to_limbs(hostile))


def test_two_offenders_whose_product_is_zero_mod_n(keys):
    """c1 = k·p and c2 = k'·q multiply to 0 mod n: the batched gcd must still see them."""
    pk, sk = keys
    with pytest.raises(InvalidCiphertextError, match="#1 "):
        pk.check_ciphertexts([pk.raw_encrypt([1])[0], _nonunit(sk, "p"), _nonunit(sk, "q")])


@pytest.mark.parametrize("name", AVAILABLE)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=1, max_value=40), st.data())
def test_the_unit_check_on_a_backend_refuses_exactly_what_gmpy2_refuses(keys, name, count, data):
    """With a backend, the ciphertexts' product is one grouped Montgomery product there (what a
    party runs on every received batch); the verdict and the index named are gmpy2's, for units,
    one multiple of p or q, and a pair whose product is 0 mod n."""
    pk, sk = keys
    be = unifl.backend(name)
    rng = np.random.default_rng(data.draw(st.integers(min_value=0, max_value=2**64 - 1)))
    units = [int(x) for x in pk.raw_encrypt([int(v) for v in rng.integers(0, 1000, count)])]
    pk.check_ciphertexts(pk.nsquare_ctx.to_limbs(units), be)
    idx = data.draw(st.integers(min_value=0, max_value=count))
    bad = data.draw(st.sampled_from([[_nonunit(sk, "p")], [_nonunit(sk, "q")],
                                     [_nonunit(sk, "p"), _nonunit(sk, "q")]]))
    hostile = pk.nsquare_ctx.to_limbs(units[:idx] + bad + units[idx:])
    for backend in (None, be):
        with pytest.raises(InvalidCiphertextError, match=f"#{idx} is not a unit"):
            pk.check_ciphertexts(hostile, backend)


# ----------------------------------------------------------------------- second line
@pytest.mark.parametrize("name", AVAILABLE)
@pytest.mark.parametrize("factor", ["p", "q", "n"])
def test_decryption_itself_refuses_nonunit(keys, name, factor):
    """Bypass every ingress check and hand the non-unit straight to the batched decryption of each
    backend: it must refuse, not answer (cpu/qat/fpga answered L_p(0)-based values that give p + q;
    native answered 0)."""
    pk, sk = keys
    be = unifl.backend(name)
    ctx = pk.nsquare_ctx
    honest = pk.raw_encrypt([11, 12])
    vals = [honest[0], _nonunit(sk, factor), honest[1]]
    c_mont = base_op.to_mont(be, ctx, ctx.to_limbs(vals))
    with pytest.raises(InvalidCiphertextError):
        paillier.decrypt_limbs(be, sk, c_mont)
    # honest batches are untouched
    ok = base_op.to_mont(be, ctx, ctx.to_limbs(honest))
    assert base_op.from_limbs(paillier.decrypt_limbs(be, sk, ok)) == [11, 12]


# ----------------------------------------------------------------------- key limits
@pytest.fixture
def no_primality(monkeypatch):
    """Any primality/squareness test during the call is a failure: limits must come first."""
    calls = []

    def boom(*args, **kwargs):
        calls.append(args)
        raise AssertionError("primality test ran before the size limits")

    monkeypatch.setattr(gmpy2, "is_prime", boom)
    monkeypatch.setattr(gmpy2, "is_square", boom)
    yield calls
    assert not calls


def _json(**fields) -> str:
    import json
    return json.dumps({"unifl": 1, **{k: (format(v, "x") if isinstance(v, int) else v)
                                      for k, v in fields.items()}})


OVERSIZE = (1 << 8200) + 1            # odd, 8201 bits: a peer's "key" to make us test primality


def test_oversize_keys_refused_before_primality(no_primality):
    with pytest.raises(WeakKeyError, match="maximum of 8192"):
        paillier.PublicKey(OVERSIZE)
    with pytest.raises(WeakKeyError, match="maximum of 8192"):
        rsa.PublicKey(OVERSIZE)
    with pytest.raises(WeakKeyError, match="maximum of 4096"):
        paillier.PrivateKey(OVERSIZE, 3)
    with pytest.raises(WeakKeyError, match="maximum of 4096"):
        rsa.PrivateKey((1 << 4100) + 1, (1 << 1000) + 1)
    for text in (_json(kind="paillier.public", n=OVERSIZE),
                 _json(kind="rsa.public", n=OVERSIZE, e=65537),
                 _json(kind="paillier.private", p=OVERSIZE, q=7),
                 _json(kind="rsa.private", p=(1 << 4100) + 1, q=(1 << 1000) + 1, e=65537)):
        with pytest.raises(WeakKeyError, match="maximum"):
            serialize.key_from_json(text)


def test_key_below_party_floor_refused_before_primality(keys, rsa_keys, no_primality):
    pk, sk = keys
    with pytest.raises(WeakKeyError, match="floor of 2048"):
        serialize.key_from_json(serialize.key_to_json(pk), min_bits=2048)
    with pytest.raises(WeakKeyError, match="floor of 2048"):
        serialize.key_from_json(serialize.key_to_json(sk), min_bits=2048)
    rpk, rsk = rsa_keys
    with pytest.raises(WeakKeyError, match="floor of 2048"):
        serialize.key_from_json(serialize.key_to_json(rpk), min_bits=2048)
    with pytest.raises(WeakKeyError, match="floor of 2048"):
        serialize.key_from_json(serialize.key_to_json(rsk), min_bits=2048)


def test_key_at_floor_accepted(keys):
    pk, _ = keys
    assert serialize.key_from_json(serialize.key_to_json(pk), min_bits=1024) == pk


@pytest.mark.parametrize("e", [3, 17, 65539, (1 << 4000) + 1], ids=["3", "17", "65539", "huge"])
def test_rsa_exponent_other_than_65537_refused(e, rsa_keys, no_primality):
    rpk, rsk = rsa_keys
    with pytest.raises(WeakKeyError, match="65537"):
        serialize.key_from_json(_json(kind="rsa.public", n=rpk.n, e=e))
    with pytest.raises(WeakKeyError, match="65537"):
        serialize.key_from_json(_json(kind="rsa.private", p=rsk.p, q=rsk.q, e=e))
    with pytest.raises(WeakKeyError, match="65537"):
        rsa.PublicKey(rpk.n, e)
    with pytest.raises(WeakKeyError, match="65537"):
        rsa.PrivateKey(rsk.p, rsk.q, e)


@pytest.mark.parametrize("n", ["-" + "f" * 256, "0x" + "f" * 256, "f" * 9000, " ff", "1_f"],
                         ids=["sign", "0x", "long", "space", "underscore"])
def test_key_json_malformed_integers_refused(n):
    with pytest.raises(SerializationError, match="hex integer"):
        serialize.key_from_json(_json(kind="paillier.public", n=n))


# ----------------------------------------------------------------------- frame shapes
def _frame(pk: paillier.PublicKey, shape, payload: bytes, ndim: int | None = None,
           scale: int = 0) -> bytes:
    """A well-formed (correct magic, version, fingerprint, CRC) frame with a chosen shape."""
    ndim = len(shape) if ndim is None else ndim
    head = serialize._HEAD.pack(serialize.FRAME_MAGIC, serialize.FRAME_VERSION, 0,
                                bytes.fromhex(pk.fingerprint)[:16], scale, ndim,
                                pk.nsquare_ctx.num_limbs)
    body = head + struct.pack(f"<{ndim}Q", *shape) + struct.pack("<I", 1) + b"\x01" + payload
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize("shape", [(2**33, 2**33), (2**40, 2**40, 0), (2**64 - 1, 0),
                                   (2**32, 2**32, 2**32, 2**32)])
def test_frame_shape_overflow_refused(keys, shape):
    """With int64 arithmetic (2^33)·(2^33) wraps to 0, so an empty payload passed for a 2^66-element
    array that later code trusts for sizes and loops."""
    pk, _ = keys
    with pytest.raises(SerializationError, match="2\\^63"):
        serialize.array_from_bytes(_frame(pk, shape, b""), pk)


def test_frame_shape_too_many_dims_refused(keys):
    pk, _ = keys
    with pytest.raises(SerializationError, match="dimensions"):
        serialize.array_from_bytes(_frame(pk, (1,) * 255, b""), pk)
    # a shape whose count does not match the payload
    one = pk.raw_encrypt([1])[0].to_bytes(pk.nsquare_ctx.num_limbs * 8, "little")
    with pytest.raises(SerializationError, match="needs"):
        serialize.array_from_bytes(_frame(pk, (2,), one), pk)


def test_frame_negative_scale_refused(keys):
    pk, _ = keys
    one = pk.raw_encrypt([1])[0].to_bytes(pk.nsquare_ctx.num_limbs * 8, "little")
    assert serialize.array_from_bytes(_frame(pk, (1,), one, scale=3), pk).scale_bits == 3
    with pytest.raises(SerializationError, match="negative scale"):
        serialize.array_from_bytes(_frame(pk, (1,), one, scale=-5), pk)


def test_encrypted_array_refuses_wrapped_shape(keys):
    pk, _ = keys
    with pytest.raises(OperandError, match="do not match"):
        EncryptedArray(pk, np.zeros((0, pk.nsquare_ctx.num_limbs), np.uint64), (2**33, 2**33), 0,
                       0, "cpu")


def _codec_array(code: int, shape, data: bytes = b"") -> bytes:
    return (codec.MAGIC + bytes([codec.VERSION]) + b"A" + bytes([code, len(shape)])
            + struct.pack(f"<{len(shape)}Q", *shape) + data)


@pytest.mark.parametrize("shape", [(2**40, 2**40, 0), (0,) * 255, (2**33, 2**33), (2**63, 0)])
def test_codec_array_shape_refused(shape):
    with pytest.raises(SerializationError):
        codec.decode(_codec_array(8, shape))


def test_codec_array_honest_round_trip():
    for arr in (np.arange(12, dtype=np.int64).reshape(3, 4), np.zeros((0, 5)),
                np.array([2.5], dtype=np.float32)):
        out = codec.decode(codec.encode(arr))
        assert out.shape == np.shape(arr) and np.array_equal(out, arr)


# ----------------------------------------------------------------------- RSA faults
def _fault_p_half(monkeypatch, sk: rsa.PrivateKey) -> None:
    """A faulty device: the private ModExp mod p comes back with its lowest bit flipped.  (The
    private op uses the secret-exponent ModExp where the SDK has one; only that one is faulted, so
    the public-exponent check itself runs on healthy hardware.)"""
    name = "mod_exp_secret" if hasattr(mod_op, "mod_exp_secret") else "mod_exp"
    real = getattr(mod_op, name)

    def faulty(be, ctx, x, e, *args, **kwargs):
        out = np.array(real(be, ctx, x, e, *args, **kwargs), dtype=np.uint64)
        if ctx.m == sk.p:
            out[:, 0] ^= np.uint64(1)
        return out

    monkeypatch.setattr(rsa.mod_op, name, faulty)


@pytest.mark.parametrize("name", ["cpu", "native"])
def test_faulty_crt_signature_never_leaves(monkeypatch, name):
    if name not in AVAILABLE:
        pytest.skip(f"{name} backend not available here")
    pk, sk = rsa_keypair(1024)
    blinded, _ = pk.blind(rsa.full_domain_hash(["alice", "bob"], pk.n), backend=name)
    honest = sk.sign(blinded, backend=name)
    assert honest == [pow(y, sk.d, pk.n) for y in blinded]
    # what a faulty signature would give the client: gcd(s^e − y, n) = q (Bellcore attack)
    sp, sq = (honest[0] % sk.p) ^ 1, honest[0] % sk.q
    s_bad = sq + sk.q * ((sp - sq) * sk.q_inverse % sk.p)
    assert math.gcd(pow(s_bad, pk.e, pk.n) - blinded[0], pk.n) == sk.q
    _fault_p_half(monkeypatch, sk)
    with pytest.raises(SignatureError, match="#0"):
        sk.sign(blinded, backend=name)


def test_forged_signature_refused_by_verify():
    pk, sk = rsa_keypair(1024)
    h = rsa.full_domain_hash(["x", "y"], pk.n)
    sigs = sk.sign(h, backend="cpu")
    pk.verify(h, sigs, backend="cpu")
    with pytest.raises(SignatureError, match="#1"):
        pk.verify(h, [sigs[0], (sigs[1] + 1) % pk.n], backend="cpu")


def test_unblind_refuses_out_of_range():
    pk, sk = rsa_keypair(1024)
    with pytest.raises(OperandError):
        pk.unblind([pk.n], [3], backend="cpu")              # a signer's value >= n
    with pytest.raises(OperandError, match="blinding factor"):
        pk.unblind([5], [0], backend="cpu")
    with pytest.raises(OperandError, match="blinding factor"):
        pk.unblind([5], [pk.n + 1], backend="cpu")
