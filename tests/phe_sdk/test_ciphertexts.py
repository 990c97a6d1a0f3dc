"""``CiphertextBatch`` (the one Paillier path under EncryptedArray and the FATE kit) against
Paillier written out on Python ints: every operation's ciphertexts equal the textbook formula mod n²
bit for bit, on ``cpu`` and ``native``, and their plaintexts decrypt to the integer result; the
overflow bookkeeping refuses what could wrap and nothing else."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unifl.core.errors import (EncodingOverflowError, InvalidCiphertextError, KeyMismatchError,
                               OperandError)
from unifl.core.limbs import from_limbs
from unifl.phe_sdk import paillier
from unifl.phe_sdk.ciphertexts import CiphertextBatch

from tests.helpers.keys import paillier_keypair

BACKENDS = ["cpu", "native"]
SETTINGS = settings(max_examples=20, deadline=None)

plain = st.integers(min_value=-(2 ** 200), max_value=2 ** 200)
small = st.integers(min_value=-(2 ** 64), max_value=2 ** 64)


def keys():
    return paillier_keypair(1024)


def cts(batch: CiphertextBatch) -> list[int]:
    """The plain ciphertext ints of a batch."""
    return from_limbs(batch.ciphertexts())


def enc(values, backend, **kw) -> CiphertextBatch:
    return CiphertextBatch.encrypt(keys()[0], values, backend, **kw)


@SETTINGS
@given(a=st.lists(plain, min_size=1, max_size=6), data=st.data())
def test_ciphertexts_follow_the_textbook_formulas(a, data):
    pk, sk = keys()
    n, nsq = pk.n, pk.nsquare
    name = data.draw(st.sampled_from(BACKENDS))
    b = data.draw(st.lists(plain, min_size=len(a), max_size=len(a)))
    k = data.draw(st.lists(small, min_size=len(a), max_size=len(a)))
    ea, eb = enc(a, name), enc(b, name)
    ca, cb = cts(ea), cts(eb)
    assert ea.decrypt(sk) == a and eb.decrypt(sk) == b
    assert cts(ea.add(eb)) == [x * y % nsq for x, y in zip(ca, cb)]
    assert cts(ea.add_plain(b)) == [x * (1 + (v % n) * n) % nsq for x, v in zip(ca, b)]
    assert cts(ea.add_plain(b[:1])) == [x * (1 + (b[0] % n) * n) % nsq for x in ca]
    assert cts(ea.neg()) == [pow(x, -1, nsq) for x in ca]
    assert cts(ea.sub(eb)) == [x * pow(y, -1, nsq) % nsq for x, y in zip(ca, cb)]
    # negative multipliers: the inverse to the power |k| (Python's pow does the same)
    assert cts(ea.mul(k)) == [pow(x, v, nsq) for x, v in zip(ca, k)]
    assert cts(ea.mul(k[:1])) == [pow(x, k[0], nsq) for x in ca]
    assert ea.add(eb).decrypt(sk) == [x + y for x, y in zip(a, b)]
    assert ea.sub(eb).decrypt(sk) == [x - y for x, y in zip(a, b)]
    assert ea.mul(k).decrypt(sk) == [x * v for x, v in zip(a, k)]


@SETTINGS
@given(a=st.lists(plain, min_size=1, max_size=6), data=st.data())
def test_lift_groups_take_put_concatenate(a, data):
    pk, sk = keys()
    nsq = pk.nsquare
    name = data.draw(st.sampled_from(BACKENDS))
    d = data.draw(st.lists(st.integers(0, 70), min_size=len(a), max_size=len(a)))
    groups = data.draw(st.lists(st.integers(0, 3), min_size=len(a), max_size=len(a)))
    idx = data.draw(st.lists(st.integers(0, len(a) - 1), min_size=0, max_size=8))
    ea = enc(a, name)
    ca = cts(ea)
    assert cts(ea.lift(d)) == [pow(x, 1 << s, nsq) for x, s in zip(ca, d)]
    assert cts(ea.lift(d[0])) == [pow(x, 1 << d[0], nsq) for x in ca]
    assert ea.lift(d).decrypt(sk) == [x << s for x, s in zip(a, d)]
    want = [1] * 4
    for x, g in zip(ca, groups):
        want[g] = want[g] * x % nsq
    summed = ea.sum_groups(groups, 4)
    assert cts(summed) == want                       # empty groups: E(0) = 1
    assert summed.decrypt(sk) == [sum(v for v, g in zip(a, groups) if g == j) for j in range(4)]
    assert cts(ea.take(idx)) == [ca[i] for i in idx]
    assert ea.take(list(range(len(a)))) is ea        # the identity gathers nothing
    if idx:
        repl = enc([7] * len(set(idx)), name)
        got = cts(ea.put(sorted(set(idx)), repl))
        assert [got[i] for i in sorted(set(idx))] == cts(repl)
        assert [got[i] for i in range(len(a)) if i not in idx] == \
            [ca[i] for i in range(len(a)) if i not in idx]
        assert cts(ea) == ca                          # batches are values: the operand is intact
    joined = CiphertextBatch.concatenate([ea, ea.neg()])
    assert joined.decrypt(sk) == a + [-v for v in a]


@SETTINGS
@given(m=st.integers(1, 3), k=st.integers(1, 4), p=st.integers(1, 3), data=st.data())
def test_matmul_and_rmatmul_are_shared_base_multi_exponentiations(m, k, p, data):
    pk, sk = keys()
    nsq = pk.nsquare
    name = data.draw(st.sampled_from(BACKENDS))
    a = data.draw(st.lists(plain, min_size=m * k, max_size=m * k))
    bmat = np.array(data.draw(st.lists(small, min_size=k * p, max_size=k * p)),
                    dtype=object).reshape(k, p)
    xmat = np.array(data.draw(st.lists(small, min_size=p * m, max_size=p * m)),
                    dtype=object).reshape(p, m)
    ea = enc(a, name)
    ca = np.array(cts(ea), dtype=object).reshape(m, k)
    amat = np.array(a, dtype=object).reshape(m, k)

    def prod_pow(bases, exps):
        out = 1
        for x, e in zip(bases, exps):
            out = out * pow(int(x), int(e), nsq) % nsq
        return out

    out = ea.matmul((m, k), bmat)
    assert cts(out) == [prod_pow(ca[j], bmat[:, c]) for j in range(m) for c in range(p)]
    assert out.decrypt(sk) == list((amat @ bmat).reshape(-1))
    # rmatmul: X (p, m) @ A (m, k)
    rout = ea.rmatmul((m, k), xmat)
    assert cts(rout) == [prod_pow(ca[:, c], xmat[r]) for r in range(p) for c in range(k)]
    assert rout.decrypt(sk) == list((xmat @ amat).reshape(-1))


@pytest.mark.parametrize("name", BACKENDS)
def test_backends_agree_bit_for_bit(name):
    """The same ciphertexts through a chain on ``name`` and on cpu: identical limbs."""
    pk, sk = keys()
    base = enc([3, -5, 2 ** 100, 0], "cpu")
    chains = []
    for be in ("cpu", name):
        x = base.to(be)
        y = x.add(x.neg().mul([3, -1, 2, 5])).lift([0, 3, 1, 2]).add_plain([1, -2, 3, -4])
        chains.append(np.asarray(y.sum_groups([0, 1, 0, 1], 2).limbs))
    assert np.array_equal(chains[0], chains[1])


def test_deterministic_encryption_is_g_to_the_m():
    pk, _ = keys()
    n, nsq = pk.n, pk.nsquare
    got = cts(enc([0, 5, -5], "cpu", obfuscate=False))
    assert got == [1, 1 + 5 * n, (1 + (n - 5) * n) % nsq]
    with pytest.raises(OperandError, match="obfuscate"):
        CiphertextBatch.encrypt(pk, [1], "cpu", private_key=keys()[1], obfuscate=False)


def test_key_owner_encryption_decrypts_the_same():
    pk, sk = keys()
    b = CiphertextBatch.encrypt(pk, [1, -2, 3], "native", private_key=sk)
    assert b.decrypt(sk) == [1, -2, 3]
    other_pk, other_sk = paillier_keypair(2048)
    with pytest.raises(KeyMismatchError):
        CiphertextBatch.encrypt(pk, [1], "cpu", private_key=other_sk)
    with pytest.raises(KeyMismatchError):
        b.decrypt(other_sk)
    with pytest.raises(KeyMismatchError):
        b.add(CiphertextBatch.encrypt(other_pk, [1, 2, 3], "cpu"))


def test_tracked_bounds_refuse_growth_past_max_int():
    pk, sk = keys()
    half = pk.max_int // 2 + 1
    b = enc([half, -half], "cpu")
    assert b.bound == half
    with pytest.raises(EncodingOverflowError, match="sum"):
        b.add(b)
    with pytest.raises(EncodingOverflowError, match="product"):
        b.mul([2])
    with pytest.raises(EncodingOverflowError, match="rescaling"):
        b.lift(1)
    with pytest.raises(EncodingOverflowError, match="sum"):
        b.sum_groups([0, 0], 1)
    with pytest.raises(EncodingOverflowError, match="matmul"):
        b.matmul((1, 2), np.array([[1], [1]], dtype=object))
    with pytest.raises(EncodingOverflowError):
        enc([pk.max_int + 1], "cpu")
    assert b.mul([1]).bound == half and b.sum_groups([0, 1], 2).bound == half
    assert b.neg().decrypt(sk) == [-half, half]


def test_untracked_batches_compute_what_fits_mod_n():
    """Without a bound (the FATE kit), values up to n/2 are fine (packed layouts use them); what
    cannot be represented mod n at all is refused."""
    pk, sk = keys()
    big = pk.n // 2
    b = enc([big, 1], "cpu", tracked=False)
    assert b.bound is None
    assert b.add(b.neg()).decrypt_residues(sk) == [0, 0]
    assert b.mul([2]).decrypt_residues(sk) == [2 * big % pk.n, 2]
    with pytest.raises(EncodingOverflowError, match="cannot be represented"):
        enc([pk.n], "cpu", tracked=False)
    with pytest.raises(EncodingOverflowError, match="cannot be represented"):
        b.add_plain([-pk.n])


def test_operands_are_checked():
    pk, sk = keys()
    b = enc([1, 2, 3], "cpu")
    with pytest.raises(OperandError, match="integers"):
        b.mul([0.5])
    with pytest.raises(OperandError, match="multipliers"):
        b.mul([1, 2])
    with pytest.raises(OperandError, match="coarser"):
        b.lift([0, -1, 0])
    with pytest.raises(OperandError, match="group ids"):
        b.sum_groups([0, 1, 2], 2)
    with pytest.raises(OperandError, match="align"):
        b.matmul((2, 2), np.array([[1], [1]]))
    with pytest.raises(OperandError, match="shape"):
        CiphertextBatch(pk, np.zeros((3, 5), np.uint64))


def test_ciphertexts_from_outside_must_be_units():
    pk, sk = keys()
    honest = enc([4, 5], "cpu")
    plain = honest.ciphertexts()
    back = CiphertextBatch.from_ciphertexts(pk, plain, "native")
    assert back.decrypt(sk) == [4, 5]
    bad = plain.copy()
    bad[1] = pk.nsquare_ctx.to_limbs([sk.p * 3])[0]
    with pytest.raises(InvalidCiphertextError, match="#1"):
        CiphertextBatch.from_ciphertexts(pk, bad, "cpu")
    zero = plain.copy()
    zero[0] = 0
    with pytest.raises(InvalidCiphertextError, match="#0"):
        CiphertextBatch.from_ciphertexts(pk, zero, "cpu")


def test_obfuscate_rerandomises_and_keeps_plaintexts():
    pk, sk = keys()
    b = enc([9, -9], "native")
    o = b.obfuscate()
    assert o.decrypt(sk) == [9, -9]
    assert set(cts(o)).isdisjoint(cts(b))
    assert paillier.PublicKey(pk.n) == o.public_key


def _exponent_values(exps: np.ndarray) -> list[list[int]]:
    return [[sum(int(limb) << (64 * i) for i, limb in enumerate(e)) for e in row] for row in exps]


@SETTINGS
@given(k=st.integers(0, 3), n=st.integers(0, 5), data=st.data())
def test_vectorised_exponents_equal_the_python_ones(k, n, data):
    """The int64 path of the matmul exponents (features and gradients at the SDK's scales) gives
    the very exponents, sign split and bound of the Python-int path, and a matrix with a value it
    cannot hold exactly (|v| of 2^42 or more, INT64_MIN, an unsigned value past 2^63) takes the
    Python path."""
    from unifl.phe_sdk.ciphertexts import _exponent_rows, _int_matrix
    value = st.one_of(st.integers(-2 ** 41, 2 ** 41), st.integers(-2 ** 70, 2 ** 70),
                      st.sampled_from([0, 1, -1, 2 ** 42, -2 ** 42, -2 ** 63, 2 ** 63 - 1]))
    vals = data.draw(st.lists(value, min_size=k * n, max_size=k * n))
    obj = np.array(vals, dtype=object).reshape(k, n)
    typed = _int_matrix(obj)
    assert typed.dtype == (np.int64 if all(-2 ** 63 <= v < 2 ** 63 for v in vals) else object)
    fast, slow = _exponent_rows(typed), _exponent_rows(obj)      # obj: always the Python path
    assert fast[1:] == slow[1:]
    assert _exponent_values(fast[0]) == _exponent_values(slow[0])
    assert fast[0].shape[:2] == (k, 2 * n if fast[1] else n)


def test_integer_matrices_of_any_dtype_keep_their_values():
    from unifl.phe_sdk.ciphertexts import _int_matrix
    assert _int_matrix(np.array([[2 ** 64 - 1]], dtype=np.uint64)).tolist() == [[2 ** 64 - 1]]
    assert _int_matrix(np.array([[2 ** 63 - 1, -3]], dtype=np.int64)).dtype == np.int64
    assert _int_matrix(np.array([[True, False]])).tolist() == [[1, 0]]
    with pytest.raises(OperandError, match="encode"):
        _int_matrix(np.array([[0.5]]))
