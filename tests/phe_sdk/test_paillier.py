"""Paillier: compatibility with python-paillier, homomorphic identities (hypothesis), EncryptedArray
against NumPy, the obfuscation pool and the DJN fixed-base option."""

from __future__ import annotations

import secrets

import numpy as np
import phe
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import unifl
from unifl import base_op
from unifl.base_op import from_limbs, to_limbs
from unifl.phe_sdk import paillier as P
from unifl.phe_sdk.array import EncryptedArray, histogram

from tests.helpers.keys import paillier_keypair

BACKENDS = ["cpu", "native"]
SETTINGS = settings(max_examples=25, deadline=None)


@pytest.mark.parametrize("bits", [1024, 2048])
@pytest.mark.parametrize("name", BACKENDS)
def test_bit_compatible_with_python_paillier(name, bits):
    pk, sk = paillier_keypair(bits)
    ppk = phe.PaillierPublicKey(pk.n)
    psk = phe.PaillierPrivateKey(ppk, sk.p, sk.q)
    ms = [0, 1, pk.n - 1, pk.max_int, pk.n - pk.max_int] + [secrets.randbelow(pk.n) for _ in range(8)]
    rs = [secrets.randbelow(pk.n - 1) + 1 for _ in ms]
    ours = pk.raw_encrypt(ms, backend=name, r_values=rs)
    assert ours == [ppk.raw_encrypt(m, r_value=r) for m, r in zip(ms, rs)]
    assert sk.raw_decrypt(ours, backend=name) == ms
    theirs = [ppk.encrypt(m).ciphertext() for m in (5, 17)]
    assert sk.raw_decrypt(theirs, backend=name) == [5, 17]
    assert [psk.raw_decrypt(c) for c in pk.raw_encrypt(ms, backend=name)] == ms


def test_keygen_sizes_and_primes():
    pk, sk = paillier_keypair(1024)
    assert pk.n.bit_length() == 1024 and sk.p.bit_length() == sk.q.bit_length() == 512
    assert sk.p < sk.q and sk.p * sk.q == pk.n
    assert "p=" not in repr(sk) and str(sk.p) not in repr(sk)
    assert unifl.phe_sdk.paillier.DEFAULT_KEY_BITS == 2048


def test_encryption_is_randomised():
    pk, sk = paillier_keypair(1024)
    c = pk.raw_encrypt([7, 7, 7])
    assert len(set(c)) == 3 and sk.raw_decrypt(c) == [7, 7, 7]


ints = st.integers(min_value=-(2 ** 60), max_value=2 ** 60)


@SETTINGS
@given(a=st.lists(ints, min_size=1, max_size=6), data=st.data())
def test_homomorphic_identities(a, data):
    pk, sk = paillier_keypair(1024)
    b = data.draw(st.lists(ints, min_size=len(a), max_size=len(a)))
    k = data.draw(st.lists(st.integers(-(2 ** 40), 2 ** 40), min_size=len(a), max_size=len(a)))
    name = data.draw(st.sampled_from(BACKENDS))
    ea = EncryptedArray.encrypt(pk, np.array(a, dtype=object), backend=name)
    eb = EncryptedArray.encrypt(pk, np.array(b, dtype=object), backend=name)
    A, B, K = (np.array(v, dtype=object) for v in (a, b, k))
    assert list((ea + eb).decrypt(sk)) == list(A + B)                  # E(a)E(b) = E(a+b)
    assert list((ea - eb).decrypt(sk)) == list(A - B)
    assert list((ea * K).decrypt(sk)) == list(A * K)                   # E(a)^k = E(ka)
    assert list((ea + B).decrypt(sk)) == list(A + B)                   # E(a)·g^b = E(a+b)
    assert (ea.sum()).decrypt(sk) == sum(a)
    assert list((-ea).decrypt(sk)) == [-v for v in a]
    assert list((K @ ea.reshape(-1, 1)).decrypt(sk)) == [int(np.dot(K, A))]


@SETTINGS
@given(x=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=8),
       scale=st.integers(0, 40))
def test_float_round_trip(x, scale):
    pk, sk = paillier_keypair(1024)
    arr = np.array(x)
    got = EncryptedArray.encrypt(pk, arr, scale_bits=scale).decrypt(sk)
    assert np.all(np.abs(got - arr) <= 2.0 ** -(scale + 1) * (1 + 1e-12))


@pytest.mark.parametrize("name", BACKENDS)
def test_encrypted_array_matches_numpy(name):
    pk, sk = paillier_keypair(1024)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 5))
    w = rng.normal(size=(5, 3))
    e = EncryptedArray.encrypt(pk, x, backend=name)
    tol = 1e-5
    assert e.shape == (4, 5) and e.ndim == 2 and len(e) == 4 and e.size == 20
    assert np.allclose(e.decrypt(sk), x, atol=tol)
    assert np.allclose((e + e).decrypt(sk), 2 * x, atol=tol)
    assert np.allclose((e + x[0]).decrypt(sk), x + x[0], atol=tol)          # broadcasting
    assert np.allclose((e * x[:, :1]).decrypt(sk), x * x[:, :1], atol=tol)
    assert np.allclose((e @ w).decrypt(sk), x @ w, atol=tol)
    assert np.allclose((w.T @ e.T).decrypt(sk), w.T @ x.T, atol=tol)
    assert np.allclose((x[0] @ e.T).decrypt(sk), x[0] @ x.T, atol=tol)
    assert np.allclose(e[1:3, ::2].decrypt(sk), x[1:3, ::2], atol=tol)
    assert np.allclose(e.reshape(5, 4).decrypt(sk), x.reshape(5, 4), atol=tol)
    for axis in (None, 0, 1, -1):
        assert np.allclose(e.sum(axis=axis).decrypt(sk), x.sum(axis=axis), atol=tol)
    assert np.allclose((2.5 - e).decrypt(sk), 2.5 - x, atol=tol)
    assert np.allclose((e / 4).decrypt(sk), x / 4, atol=tol)
    cat = EncryptedArray.concatenate([e, e[:1]], axis=0)
    assert np.allclose(cat.decrypt(sk), np.concatenate([x, x[:1]]), atol=tol)
    o = e.obfuscate()
    assert o.ciphertexts() != e.ciphertexts() and np.allclose(o.decrypt(sk), x, atol=tol)


def test_scale_alignment_and_exact_decode():
    pk, sk = paillier_keypair(1024)
    a = EncryptedArray.encrypt(pk, np.array([0.5]), scale_bits=4)
    b = EncryptedArray.encrypt(pk, np.array([0.125]), scale_bits=10)
    s = a + b
    assert s.scale_bits == 10 and s.decrypt(sk)[0] == 0.625
    from fractions import Fraction
    assert s.decrypt(sk, exact=True)[0] == Fraction(5, 8)


@pytest.mark.parametrize("name", BACKENDS)
def test_histogram(name):
    pk, sk = paillier_keypair(1024)
    rng = np.random.default_rng(5)
    g = rng.integers(-1000, 1000, 50)
    bins = rng.integers(0, 4, (50, 3))
    h = histogram(EncryptedArray.encrypt(pk, g, backend=name), bins, 4).decrypt(sk)
    ref = np.zeros((3, 4), dtype=np.int64)
    for f in range(3):
        np.add.at(ref[f], bins[:, f], g)
    assert np.array_equal(h.astype(np.int64), ref)


@pytest.mark.parametrize("name", BACKENDS)
def test_pool_and_fixed_base(name):
    _, sk0 = paillier_keypair(1024)
    sk = P.PrivateKey(sk0.p, sk0.q)            # a fresh key object (its own fixed-base table)
    pk = sk.public_key
    be = unifl.backend(name)
    pool = pk.obfuscators(be)
    pool.clear()          # one pool per key and backend instance: another test's leftovers
    s0 = pool.stats()
    pk.precompute(5, backend=be)
    assert pk.pool_size(be) == 5
    c = pk.raw_encrypt([1, 2, 3], backend=be)
    assert pk.pool_size(be) == 2 and sk.raw_decrypt(c, backend=name) == [1, 2, 3]
    c = pk.raw_encrypt([4, 5, 6], backend=be)       # pool too small: its 2 factors, then a fresh r
    assert pk.pool_size(be) == 0 and sk.raw_decrypt(c) == [4, 5, 6]
    s1 = pool.stats()
    assert (s1.filled - s0.filled, s1.hits - s0.hits, s1.misses - s0.misses) == (5, 5, 1)
    fb = pk.enable_fixed_base(window=4, backend=name)
    assert fb.exp_bits == 512
    pk.precompute(3, backend=be)                    # factors of the fixed base, used once each
    c = pk.raw_encrypt([7, 8, pk.n - 1], backend=be)
    assert len(set(c)) == 3 and sk.raw_decrypt(c, backend=name) == [7, 8, pk.n - 1]
    assert pk.pool_size(be) == 0
    c = pk.raw_encrypt([7, 8, pk.n - 1], backend=name)
    assert len(set(c)) == 3 and sk.raw_decrypt(c, backend=name) == [7, 8, pk.n - 1]
    with pytest.raises(unifl.WeakKeyError):
        pk.enable_fixed_base(exp_bits=100)


@pytest.mark.parametrize("name", BACKENDS)
def test_crt_encryption_by_key_owner(name):
    pk, sk = paillier_keypair(1024)
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(10)]
    rs = [secrets.randbelow(pk.n - 1) + 1 for _ in ms]
    assert sk.raw_encrypt(ms, backend=name, r_values=rs) == pk.raw_encrypt(ms, backend=name,
                                                                          r_values=rs)
    assert sk.raw_decrypt(sk.raw_encrypt(ms, backend=name)) == ms
    x = np.array([0.25, -3.0])
    assert np.allclose(EncryptedArray.encrypt(pk, x, private_key=sk, backend=name).decrypt(sk), x)
    _, other = paillier_keypair(2048)
    with pytest.raises(unifl.KeyMismatchError):
        EncryptedArray.encrypt(pk, x, private_key=other)


def test_key_owner_half_exponent_obfuscation_is_r_to_the_n():
    """The key owner's fresh obfuscators y_p^p mod p², y_q^q mod q² (CRT) are r^n mod n² for the r
    with r ≡ y_p^(q^-1 mod p−1) (mod p) and likewise mod q: the identity r^n mod p² = (r^q mod p)^p
    mod p² that makes their distribution exactly that of r^n."""
    pk, sk = paillier_keypair(1024)
    p, q = sk.p, sk.q
    assert sk.half_exponent_obfuscation
    for _ in range(20):
        r = secrets.randbelow(pk.n - 2) + 2
        assert pow(r, pk.n, p * p) == pow(pow(r, q, p), p, p * p)
        assert pow(r, pk.n, q * q) == pow(pow(r, p, q), q, q * q)
    # the same y on two backends gives the same ciphertext of 0 (the factor itself, Montgomery
    # form), and it equals r^n mod n² for r built by CRT
    yp, yq = secrets.randbelow(p - 1) + 1, secrets.randbelow(q - 1) + 1
    mat = sk.material
    zero = pk.plaintext_limbs([0])
    outs = {}
    for name in ("cpu", "native"):
        be = unifl.backend(name)
        f = P.paillier_encrypt_owner(be, mat, zero, to_limbs([yp], mat.p_limbs),
                                     to_limbs([yq], mat.q_limbs))
        outs[name] = from_limbs(base_op.from_mont(be, pk.nsquare_ctx, f))[0]
    assert outs["cpu"] == outs["native"]
    rp = pow(yp, pow(q, -1, p - 1), p)          # r mod p with r^q ≡ y_p
    rq = pow(yq, pow(p, -1, q - 1), q)
    r = rq + q * ((rp - rq) * pow(q, -1, p) % p)
    assert outs["cpu"] == pow(r, pk.n, pk.nsquare)


@pytest.mark.parametrize("name", BACKENDS)
def test_key_owner_fixed_base_goes_through_the_crt(name):
    """With the DJN base on, the key owner's encryptions use the half-size CRT combs, and the
    public holder's the full-size one: the same ciphertexts for the same exponents a."""
    _, sk0 = paillier_keypair(1024)
    sk = P.PrivateKey(sk0.p, sk0.q)
    pk = sk.public_key
    be = unifl.backend(name)
    pk.enable_fixed_base(window=5, backend=be)
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(5)]
    m = pk.plaintext_limbs(ms)
    a = P.random_limbs(len(ms), pk.fixed_base.exp_bits)
    owner = P.paillier_encrypt_owner_fixed_base(be, sk.material, m, a)
    public = P.paillier_encrypt_fixed_base(be, pk.material, m, a)
    assert np.array_equal(np.asarray(owner), np.asarray(public))
    hs = from_limbs(base_op.from_mont(be, pk.nsquare_ctx, pk.fixed_base.hs_mont[None, :]))[0]
    want = [(1 + x * pk.n) * pow(hs, e, pk.nsquare) % pk.nsquare for x, e in zip(ms, from_limbs(a))]
    assert from_limbs(base_op.from_mont(be, pk.nsquare_ctx, owner)) == want
    # through the SDK: the owner's fresh fixed-base ciphertexts decrypt, and differ from each other
    c = sk.raw_encrypt(ms, backend=be)
    assert len(set(c)) == len(c) and sk.raw_decrypt(c, backend=be) == ms
    x = np.array([0.5, -2.25, 7.0])
    assert np.allclose(EncryptedArray.encrypt(pk, x, private_key=sk, backend=be).decrypt(sk), x)
