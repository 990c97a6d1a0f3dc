"""The cross-backend equivalence harness: every registered backend that probes available must give
results bit-identical to ``cpu`` (the gmpy2 reference) for every op, at every modulus size, on random
and edge inputs.  A new backend joins by registering; nothing here changes.

``generic`` is a test backend whose only native op is MontMult (borrowed from ``native``): it checks
the generic compositions of mod_op and phe_sdk that device backends (FPGA) rely on.
"""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from unifl.mod_op import ints
import unifl
from unifl import base_op, mod_op
from unifl.core import registry
from unifl.core.backend import Backend, ProbeResult
from unifl.base_op import from_limbs, mont_context, to_limbs
from unifl.phe_sdk import paillier as P

from tests.helpers.keys import FULL, paillier_keypair, random_odd_modulus


class GenericBackend(Backend):
    """Only MontMult is native; everything else is the generic composition."""

    name = "generic"
    native_ops = frozenset({"mont_mul"})

    @classmethod
    def probe(cls) -> ProbeResult:
        pr = registry.probe("native")
        base = "native" if pr.available else "cpu"
        return ProbeResult(True, f"MontMult from {base}, the rest composed", [base])

    def op_mont_mul(self, ctx, a, b):
        base = "native" if registry.probe("native").available else "cpu"
        return unifl.backend(base).op_mont_mul(ctx, a, b)


registry.register("generic", GenericBackend)

BACKENDS = [n for n in registry.names() if n != "cpu" and registry.probe(n).available]
SIZES = [64, 256, 1000, 1024, 1536, 2048, 2050, 3072, 4096]
N_CHEAP = 10_000 if FULL else 2_000     # MontMult / ModMult vectors per size
N_EXP = 10_000 if FULL else 300         # ModExp vectors per size (short and full exponents mixed)


def _operands(m: int, n: int) -> list[int]:
    """Random values below m plus the edges 0, 1, 2, m−1, m−2 and values with extreme limbs."""
    bits = m.bit_length()
    edges = [0, 1, 2, m - 1, m - 2, (1 << (bits - 1)) % m, ((1 << 64) - 1) % m,
             ((1 << (bits - 1)) - 1) % m]
    return edges + [secrets.randbelow(m) for _ in range(n - len(edges))]


def _exponents(m: int, n: int) -> list[int]:
    """0, 1, 2, full length, longer than m, and random lengths (mostly short, like plaintexts)."""
    bits = m.bit_length()
    edges = [0, 1, 2, 3, (1 << 64) - 1, m - 1, m + 12345, secrets.randbits(2 * bits)]
    out = edges[:]
    while len(out) < n:
        length = secrets.choice([1, 8, 17, 63, 64, 65, 128, bits // 2, bits])
        out.append(secrets.randbits(length))
    return out[:n]


@pytest.fixture(params=BACKENDS)
def be(request):
    return unifl.backend(request.param)


@pytest.fixture(scope="module")
def cpu():
    return unifl.backend("cpu")


@pytest.mark.parametrize("bits", SIZES + [8192])
def test_mont_mul_and_mod_mul(be, cpu, bits):
    m = random_odd_modulus(bits)
    a, b = _operands(m, N_CHEAP), _operands(m, N_CHEAP)[::-1]
    ref = ints.mont_mul(cpu, a, b, m)
    assert ints.mont_mul(be, a, b, m) == ref
    assert ref[:50] == [base_op.mont_mul_ref(x, y, m) for x, y in zip(a[:50], b[:50])]
    assert ints.mont_mul(be, a, a, m) == ints.mont_mul(cpu, a, a, m)          # squaring path
    assert ints.mod_mul(be, a, b, m) == ints.mod_mul(cpu, a, b, m) == [x * y % m for x, y in zip(a, b)]


@pytest.mark.parametrize("bits", SIZES)
def test_mod_exp(be, cpu, bits):
    m = random_odd_modulus(bits)
    n = N_EXP if bits <= 2050 else max(N_EXP // 4, 60)
    base = _operands(m, n)
    exps = _exponents(m, n)
    ref = ints.mod_exp(cpu, base, exps, m)
    assert ints.mod_exp(be, base, exps, m) == ref
    assert ref[:20] == [pow(x, e, m) for x, e in zip(base[:20], exps[:20])]
    for shared in (0, 1, 65537, m - 2, secrets.randbits(bits)):   # one exponent for the batch
        assert ints.mod_exp(be, base[:40], shared, m) == ints.mod_exp(cpu, base[:40], shared, m)


@pytest.mark.parametrize("bits", [256, 1024, 2048, 3072, 4096, 2050])
def test_mont_exp_multi_exp_prod_groups(be, cpu, bits):
    ctx = mont_context(random_odd_modulus(bits))
    n = 40
    x = base_op.to_mont(cpu, ctx, ctx.to_limbs(_operands(ctx.m, n)))
    e = mod_op.exp_limbs(_exponents(ctx.m, n))
    assert np.array_equal(mod_op.mont_exp(be, ctx, x, e), mod_op.mont_exp(cpu, ctx, x, e))
    k = 3
    ex = mod_op.exp_limbs([secrets.randbits(secrets.choice([0, 1, 16, 64, 130]))
                           for _ in range(k * n)])
    ex = ex.reshape(k, n, -1)
    ex[1, :] = 0                                         # an all-zero row gives Montgomery one
    assert np.array_equal(mod_op.mont_multi_exp(be, ctx, x, ex),
                          mod_op.mont_multi_exp(cpu, ctx, x, ex))
    groups = np.array([secrets.randbelow(7) for _ in range(n)], np.int64)
    groups[groups == 5] = 4                              # group 5 stays empty
    assert np.array_equal(mod_op.mont_prod_groups(be, ctx, x, groups, 7),
                          mod_op.mont_prod_groups(cpu, ctx, x, groups, 7))


@pytest.mark.parametrize("bits", [64, 1000, 2050])
def test_mont_inverse(be, cpu, bits):
    import gmpy2
    from unifl.core.errors import OperandError
    ctx = mont_context(int(gmpy2.next_prime(secrets.randbits(bits) | (1 << (bits - 1)))))
    for n in (1, 2, 300):                       # 300 rows: several thread shares natively
        vals = ([1, ctx.m - 1, 2] + [secrets.randbelow(ctx.m - 1) + 1 for _ in range(n)])[:n]
        x = base_op.to_mont(cpu, ctx, ctx.to_limbs(vals))
        inv = mod_op.mont_inverse(be, ctx, x)
        assert np.array_equal(inv, mod_op.mont_inverse(cpu, ctx, x))
        assert from_limbs(base_op.from_mont(cpu, ctx, inv)) == [pow(v, -1, ctx.m) for v in vals]
    for rows, at in ((5, 4), (300, 250)):      # 300 rows: the error comes from a worker's share
        bad = x[:rows].copy()
        bad[at] = 0
        with pytest.raises(OperandError):
            mod_op.mont_inverse(be, ctx, bad)


def test_mont_inverse_of_paillier_ciphertexts(be, cpu):
    pk, _ = paillier_keypair(1024)
    ctx = pk.nsquare_ctx
    x = base_op.to_mont(cpu, ctx, ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(200)]))
    assert np.array_equal(mod_op.mont_inverse(be, ctx, x), mod_op.mont_inverse(cpu, ctx, x))


@pytest.mark.parametrize("bits", [1024, 2048] + ([3072, 4096] if FULL else []))
def test_paillier_encrypt_decrypt(be, cpu, bits):
    pk, sk = paillier_keypair(bits)
    n = 64 if bits <= 2048 else 16
    ms = [0, 1, pk.n - 1, pk.max_int] + [secrets.randbelow(pk.n) for _ in range(n - 4)]
    rs = [secrets.randbelow(pk.n - 1) + 1 for _ in ms]
    ref = pk.raw_encrypt(ms, backend=cpu, r_values=rs)
    assert pk.raw_encrypt(ms, backend=be, r_values=rs) == ref
    assert sk.raw_decrypt(ref, backend=be) == ms
    # fixed-base (DJN) obfuscation: identical for the same exponents a
    pk2 = P.PrivateKey(sk.p, sk.q).public_key
    pk2.enable_fixed_base(window=4, backend=cpu)
    m_l = pk2.plaintext_limbs(ms[:8])
    a = to_limbs([secrets.randbits(pk2.fixed_base.exp_bits) for _ in range(8)],
                 -(-pk2.fixed_base.exp_bits // 64))
    ref_fb = P.paillier_encrypt_fixed_base(cpu, pk2.material, m_l, a)     # composed on cpu
    got = P.paillier_encrypt_fixed_base(be, pk2.material, m_l, a)        # native or composed
    assert np.array_equal(got, ref_fb)
    assert from_limbs(P.decrypt_limbs(be, sk, got)) == ms[:8]


def test_per_element_moduli_and_exponents(be, cpu):
    """One batch mixing moduli of different sizes, each element with its own exponent."""
    ms = [random_odd_modulus(b) for b in (64, 1000, 2048)]
    mods = [ms[i % 3] for i in range(60)]
    base = [secrets.randbelow(m) for m in mods]
    other = [secrets.randbelow(m) for m in mods]
    exps = [secrets.randbits(secrets.choice([0, 5, 64, 300])) for _ in mods]
    assert ints.mod_exp(be, base, exps, mods) == [pow(x, e, m) for x, e, m in zip(base, exps, mods)]
    assert ints.mod_mul(be, base, other, mods) == [x * y % m for x, y, m in zip(base, other, mods)]
    assert ints.mont_mul(be, base, other, mods) == ints.mont_mul(cpu, base, other, mods)


@pytest.mark.parametrize("owner", [False, True], ids=["public", "key-owner"])
def test_paillier_encrypt_through_the_obfuscator_pool(be, cpu, owner):
    """Factors computed ahead on the backend (r^n·R², filled by the public path or the key owner's
    CRT) and consumed by one MontMult: the same ciphertexts as cpu's direct path for the same r."""
    _, sk0 = paillier_keypair(1024)
    sk = P.PrivateKey(sk0.p, sk0.q)
    pk = sk.public_key
    ms = [0, 1, pk.n - 1, pk.max_int] + [secrets.randbelow(pk.n) for _ in range(12)]
    rs = [1, pk.n - 1] + [secrets.randbelow(pk.n - 1) + 1 for _ in range(len(ms) - 2)]
    ref = pk.raw_encrypt(ms, backend=cpu, r_values=rs)
    pool = sk.obfuscators(be) if owner else pk.obfuscators(be)
    pool.clear()                 # one pool per key and backend instance: another test's leftovers
    pool.fill(r_values=rs)
    assert (sk if owner else pk).raw_encrypt(ms, backend=be) == ref
    assert pool.ready() == 0
