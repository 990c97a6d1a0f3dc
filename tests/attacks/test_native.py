"""Hostile-peer tests of the native, gpu (host harness) and generic exponentiation layers.

Each test plays the attacker or the careless caller: it crafts the array, ciphertext or race and
asserts that the attempt is refused with a typed error (or that nothing is built twice / nothing
secret goes through a variable-time exponentiation).
"""

from __future__ import annotations

import threading
import time

import gmpy2
import numpy as np
import pytest

from unifl import base_op, mod_op
from unifl.core import registry
from unifl.core.backend import Backend
from unifl.backends.gpu import _gpu_host, keys
from unifl.backends.gpu.host import GpuHostBackend
from unifl.backends.native import NativeBackend, _native
from unifl.base_op import mont_context, to_limbs
from unifl.core.errors import InvalidCiphertextError
from unifl.phe_sdk import paillier, rsa

from tests.helpers.keys import paillier_keypair, rsa_keypair

M1024 = (1 << 1023) | 0x1234567 | 1      # an odd 1024-bit modulus: 16 limbs


def _native_be() -> NativeBackend:
    be = NativeBackend(threads=2)
    be.probe_result = NativeBackend.probe()
    return be


def _gpu_host_be() -> GpuHostBackend:
    be = GpuHostBackend(threads=2)
    be.probe_result = GpuHostBackend.probe()
    return be


def _rows(ctx, n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vals = [int(rng.integers(1, 1 << 62)) ** 16 % ctx.m for _ in range(n)]
    return to_limbs(vals, ctx.num_limbs)


# ---------------------------------------------------------------- native entry points
@pytest.fixture(scope="module")
def mod1024():
    ctx = mont_context(M1024)
    return ctx, _native.Modulus(ctx.m_limbs)


@pytest.mark.parametrize("fn", ["mont_mul", "mod_mul"])
def test_native_four_rows_against_one_row_is_refused(mod1024, fn):
    # 4-row a with a 1-row b: without the row check mod_mul read three rows past b's buffer
    ctx, M = mod1024
    a, b = _rows(ctx, 4), _rows(ctx, 1)
    with pytest.raises(ValueError, match=r"argument 'b' must have shape \(4, 16\), got \(1, 16\)"):
        getattr(_native, fn)(M, a, b, 2)


def test_native_wrong_limb_count_3d_and_strided_are_refused(mod1024):
    ctx, M = mod1024
    a = _rows(ctx, 4)
    with pytest.raises(ValueError, match=r"'a' must have shape \(N, 16\), got \(4, 15\)"):
        _native.mont_mul(M, np.ascontiguousarray(a[:, :15]), np.ascontiguousarray(a[:, :15]), 2)
    with pytest.raises(ValueError, match=r"'a' must have shape .* 3-D shape \(1, 4, 16\)"):
        _native.mont_mul(M, a[None], a[None], 2)
    strided = a[::2]                             # every other row: a view with a row stride of 2
    with pytest.raises(ValueError, match="'a' must be C-contiguous"):
        _native.mod_mul(M, strided, a[:2].copy(), 2)


def test_native_wrong_dtype_is_refused_not_cast(mod1024):
    # float64 limbs were silently cast (forcecast): 2^64-scale values lose their low bits and the
    # product was computed from different numbers than the caller's
    ctx, M = mod1024
    a = _rows(ctx, 2)
    with pytest.raises(ValueError, match="'a' must be a uint64 array .* got dtype float64"):
        _native.mod_mul(M, a.astype(np.float64), a, 2)
    with pytest.raises(ValueError, match="'exps' must be a uint64 array .* got dtype int64"):
        _native.mod_exp(M, a, np.full((2, 1), -1, np.int64), 2)
    with pytest.raises(ValueError, match="'a' must be a uint64 array"):
        _native.mod_mul(M, a.astype(">u8"), a, 2)          # big-endian bytes: other numbers


def test_native_exponent_rows_and_multi_exp_shapes(mod1024):
    ctx, M = mod1024
    a = _rows(ctx, 4)
    with pytest.raises(ValueError, match=r"'exps' must have shape \(1\|4, Le\), got \(3, 1\)"):
        _native.mod_exp_secret(M, a, np.ones((3, 1), np.uint64), 2)
    with pytest.raises(ValueError, match="'exps' must have 1..1024 limbs"):
        _native.mod_exp(M, a, np.ones((4, 0), np.uint64), 2)
    with pytest.raises(ValueError, match=r"'exps' must have shape \(N, 4, Le\), got \(2, 5, 1\)"):
        _native.mont_multi_exp(M, a, np.ones((2, 5, 1), np.uint64), 2)
    with pytest.raises(ValueError, match=r"'groups' must have shape \(4,\), got \(3,\)"):
        _native.mont_prod_groups(M, a, np.zeros(3, np.int64), 1, 2)
    with pytest.raises(ValueError, match="'groups' must be a int64 array"):
        _native.mont_prod_groups(M, a, np.zeros(4, np.float64), 1, 2)
    with pytest.raises(ValueError, match="threads must be in"):
        _native.mont_mul(M, a, a, 0)


def test_native_modulus_and_key_objects_check_their_parts():
    with pytest.raises(ValueError, match="'m' must be odd"):
        _native.Modulus(to_limbs([M1024 + 1], 16)[0])
    with pytest.raises(ValueError, match=r"'m' must have shape \(N,\)"):
        _native.Modulus(to_limbs([M1024], 16))               # 2-D
    pk, sk = paillier_keypair(1024)
    be = _native_be()
    nsq = be.modulus(pk.nsquare_ctx)
    with pytest.raises(ValueError, match="does not square to the modulus nsq"):
        _native.PaillierPublic(nsq, to_limbs([pk.n + 2], pk.n_ctx.num_limbs)[0])
    pub = _native.PaillierPublic(nsq, pk.n_ctx.m_limbs)
    L = pk.n_ctx.num_limbs
    one = lambda v: to_limbs([v], L)[0]  # noqa: E731
    # a private object assembled with someone else's prime must not come into being
    with pytest.raises(ValueError, match="'p' does not square to the modulus psq"):
        _native.PaillierPrivate(pub, be.modulus(sk.psquare_ctx), be.modulus(sk.qsquare_ctx),
                                one(sk.q), one(sk.q), one(sk.hp), one(sk.hq), one(sk.q_inverse))


def test_native_paillier_entry_points_check_every_array():
    pk, sk = paillier_keypair(1024)
    be = _native_be()
    pub = be._pub(pk)
    Ln, L2 = pk.n_ctx.num_limbs, pk.nsquare_ctx.num_limbs
    m = np.zeros((4, Ln), np.uint64)
    r1 = pk.random_r(1)
    # 4 plaintexts with 1 r: the loop read r rows 1..3 past the end of r's buffer
    with pytest.raises(ValueError, match=r"'r' must have shape \(4, 16\), got \(1, 16\)"):
        pub.encrypt(m, r1, 2)
    # a 1-limb hs: the table build read L2 limbs from it
    with pytest.raises(ValueError, match=rf"'hs_mont' must have shape \({L2},\), got \(1,\)"):
        pub.set_fixed_base(np.ones(1, np.uint64), 512, 4, 2)
    priv = _native.PaillierPrivate(pub, be.modulus(sk.psquare_ctx), be.modulus(sk.qsquare_ctx),
                                   *[to_limbs([v], Ln)[0] for v in (sk.p, sk.q, sk.hp, sk.hq,
                                                                     sk.q_inverse)])
    with pytest.raises(ValueError, match=rf"'c' must have shape \(N, {L2}\), got \(2, {L2 - 1}\)"):
        priv.decrypt(np.ones((2, L2 - 1), np.uint64), 2)


def test_gpu_host_harness_checks_arrays_and_key_blobs():
    ctx = mont_context(M1024)
    blob = keys.ctx_blob(ctx)
    a, b = _rows(ctx, 4), _rows(ctx, 1)
    with pytest.raises(ValueError, match=r"'b' must have shape \(4, 16\), got \(1, 16\)"):
        _gpu_host.mul(blob, a, b, 0, False, 1)
    with pytest.raises(ValueError, match="'a' must be C-contiguous"):
        _gpu_host.mul(blob, a[::2], a[:2].copy(), 0, False, 1)
    # a truncated blob (L says 16 limbs, the buffer ends early): the bodies read past it
    with pytest.raises(ValueError, match="'key' is truncated"):
        _gpu_host.mul(np.ascontiguousarray(blob[:20]), a, a, 0, False, 1)
    lying = blob.copy()
    lying[1] = 128                                   # claims 128 limbs in a 16-limb blob
    with pytest.raises(ValueError, match="'key' is truncated"):
        _gpu_host.exp(lying, a, np.ones((1, 1), np.uint64), 1, False, 1)
    pk, sk = paillier_keypair(1024)
    priv = keys.priv_blob(sk)
    c = np.ones((2, pk.nsquare_ctx.num_limbs), np.uint64)
    with pytest.raises(ValueError, match="'key'"):
        _gpu_host.paillier_decrypt(np.ascontiguousarray(priv[:-5]), c, False, 1)
    with pytest.raises(ValueError, match="'key'"):
        _gpu_host.paillier_decrypt(keys.ctx_blob(ctx), c, False, 1)   # a context is no key


# ---------------------------------------------------------------- the fused decryptions
def _hostile_ciphertexts(pk, sk) -> list[int]:
    """Non-units mod n² a malicious peer could send: multiples of p, of q, of n, and 0."""
    honest = pk.raw_encrypt([42])[0]
    return [honest, sk.p * 7 % pk.nsquare, honest, sk.q * 3 % pk.nsquare, pk.n * 5, 0]


@pytest.mark.parametrize("make", [_native_be, _gpu_host_be], ids=["native", "gpu_host"])
def test_fused_decrypt_refuses_non_units_naming_the_element(make):
    # The SDK's ingress check (require_units) is bypassed on purpose: this is the second line.
    # Before the fix native decrypted c = 7p to a value whose gcd with n is p (the factorisation),
    # and c = 0 to 0: silent wrong answers.
    pk, sk = paillier_keypair(1024)
    be = make()
    ctx = pk.nsquare_ctx
    cts = _hostile_ciphertexts(pk, sk)
    for i in range(1, len(cts)):
        if i == 2:
            continue
        batch = [cts[0], cts[2], cts[i]]
        c_mont = np.asarray(base_op.to_mont(be, ctx, ctx.to_limbs(batch)))
        with pytest.raises(InvalidCiphertextError, match=r"ciphertext #2 is not a unit mod n²"):
            be.op_paillier_decrypt(sk.material, c_mont)
    # honest ciphertexts still decrypt, bit-identical to cpu
    c_mont = np.asarray(base_op.to_mont(be, ctx, ctx.to_limbs([cts[0], cts[2]])))
    assert base_op.from_limbs(be.op_paillier_decrypt(sk.material, c_mont)) == [42, 42]


def test_gpu_kernel_sentinel_row_reaches_the_host_code():
    # the kernel body itself (run by the host harness) marks the element; the Python host code raises
    pk, sk = paillier_keypair(1024)
    be = _gpu_host_be()
    ctx = pk.nsquare_ctx
    c_mont = np.asarray(base_op.to_mont(be, ctx, ctx.to_limbs([pk.raw_encrypt([1])[0],
                                                                sk.p * 11 % pk.nsquare])))
    for soa in (False, True):
        out = _gpu_host.paillier_decrypt(keys.priv_blob(sk), c_mont, soa, 1)
        assert base_op.from_limbs(out[:1]) == [1]
        assert (out[1] == np.uint64(0xFFFFFFFFFFFFFFFF)).all()


# ---------------------------------------------------------------- DJN table ownership
def test_fixed_base_table_built_once_under_concurrent_first_use(monkeypatch):
    # Eight threads hit a fresh key's fixed base at once on one backend instance: the (slow) table
    # build must happen once.  State belongs to the instance: another instance builds its own.
    pk, sk = paillier.keygen(1024)
    be = _native_be()
    pk.enable_fixed_base(window=4, exp_bits=256, backend=be)
    builds = []
    real = NativeBackend._build_fixed_base

    def slow_build(self, pub, fb):
        builds.append(fb)
        time.sleep(0.05)                         # widen the window in which a racer would rebuild
        real(self, pub, fb)
    monkeypatch.setattr(NativeBackend, "_build_fixed_base", slow_build)

    shared = _native_be()
    members = [shared] * 8
    results: list = [None] * 8
    errors: list = []
    barrier = threading.Barrier(8)

    def work(k):
        try:
            barrier.wait()
            m = pk.plaintext_limbs([k, k + 100])
            results[k] = paillier.encrypt_limbs(members[k], pk, m, use_pool=False)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(builds) == 1
    for k in range(8):
        assert base_op.from_limbs(paillier.decrypt_limbs(be, sk, results[k])) == [k, k + 100]
    paillier.encrypt_limbs(_native_be(), pk, pk.plaintext_limbs([1]), use_pool=False)
    assert len(builds) == 2


# ---------------------------------------------------------------- secret exponents
class _Spy:
    """Wraps a callable and records the exponent argument of every call."""

    def __init__(self, fn, exp_pos: int) -> None:
        self.fn, self.exp_pos, self.exps = fn, exp_pos, []

    def __call__(self, *args):
        e = args[self.exp_pos]
        self.exps.extend(base_op.from_limbs(e) if isinstance(e, np.ndarray) else [int(e)])
        return self.fn(*args)


def _secrets_of(sk) -> set[int]:
    out = {sk.p - 1, sk.q - 1, sk.p, sk.q}
    if isinstance(sk, rsa.PrivateKey):
        out |= {sk.dp, sk.dq, sk.d}
    else:
        out |= {sk.public_key.n % (sk.p * (sk.p - 1)), sk.public_key.n % (sk.q * (sk.q - 1)),
                sk.q % (sk.p - 1), sk.p % (sk.q - 1)}
    return out


class _NativeGenericDecrypt(NativeBackend):
    """native without its fused key-owner ops: the generic CRT paths (what a fallback runs), whose
    secret exponentiations must still reach OpenSSL's constant-time code."""

    name = "native-generic"
    native_ops = NativeBackend.native_ops - {"paillier_decrypt", "paillier_encrypt_owner",
                                             "paillier_encrypt_owner_fixed_base"}


def test_native_secret_exponents_go_through_openssl_consttime(monkeypatch):
    pk, sk = paillier_keypair(1024)
    rpk, rsk = rsa_keypair(1024)
    secret = _spy_native(monkeypatch)
    plain = _Spy(_native.mod_exp, 2)
    mont = _Spy(_native.mont_exp, 2)
    monkeypatch.setattr(_native, "mod_exp", plain)
    monkeypatch.setattr(_native, "mont_exp", mont)
    for be in (_native_be(), _NativeGenericDecrypt(threads=2)):
        be.probe_result = NativeBackend.probe()
        c = sk.raw_encrypt([3, 4], backend=be)                       # key owner, fresh y^p
        c += sk.raw_encrypt([5], backend=be, r_values=[12345])       # key owner, explicit r
        assert sk.raw_decrypt(c, backend=be) == [3, 4, 5]
        assert rpk.raw_encrypt(rsk.sign([99], backend=be), backend=be) == [99]
    keys_secrets = _secrets_of(sk) | _secrets_of(rsk)
    assert {sk.p, sk.q, rsk.dp, rsk.dq, sk.p - 1, sk.q - 1} <= set(secret.exps)
    assert not keys_secrets & set(plain.exps + mont.exps)


def _spy_native(monkeypatch) -> _Spy:
    spy = _Spy(_native.mod_exp_secret, 2)
    monkeypatch.setattr(_native, "mod_exp_secret", spy)
    return spy


def test_cpu_secret_exponents_go_through_gmp_powm_sec(monkeypatch):
    pk, sk = paillier_keypair(1024)
    rpk, rsk = rsa_keypair(1024)
    be = registry.backend("cpu")
    sec = _Spy(gmpy2.powmod_sec, 1)
    plain = _Spy(gmpy2.powmod, 1)
    monkeypatch.setattr(gmpy2, "powmod_sec", sec)
    monkeypatch.setattr(gmpy2, "powmod", plain)
    c = sk.raw_encrypt([3, 4], backend=be) + sk.raw_encrypt([5], backend=be, r_values=[777])
    assert sk.raw_decrypt(c, backend=be) == [3, 4, 5]
    assert rpk.raw_encrypt(rsk.sign([99], backend=be), backend=be) == [99]
    assert {sk.p, sk.q, sk.p - 1, sk.q - 1, rsk.dp, rsk.dq} <= set(sec.exps)
    assert not (_secrets_of(sk) | _secrets_of(rsk)) & set(plain.exps)


def test_secret_results_bit_identical_to_plain_mod_exp():
    pk, sk = paillier_keypair(1024)
    ctx = sk.psquare_ctx
    base = ctx.to_limbs([3, 0, 1, ctx.m - 1, 2 ** 700 + 5])
    for e in ([sk.p - 1], [0], [1], [5, 0, 7, sk.p, 2 ** 64]):
        want = [pow(b, ee, ctx.m) for b, ee in zip(base_op.from_limbs(base),
                                                     e * 5 if len(e) == 1 else e)]
        for be in (registry.backend("cpu"), _native_be(), _gpu_host_be(), _MontOnly()):
            got = base_op.from_limbs(mod_op.mod_exp_secret(be, ctx, base, mod_op.exp_limbs(
                e[0] if len(e) == 1 else e)))
            assert got == want, (be.name, e)


class _MontOnly(Backend):
    """A backend with MontMult only, counting its calls: the generic compositions run on it."""

    name = "montonly"
    native_ops = frozenset({"mont_mul"})

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def op_mont_mul(self, ctx, a, b):
        self.calls += 1
        m, rinv = ctx.m, pow(ctx.R, -1, ctx.m)
        return to_limbs([x * y * rinv % m for x, y in zip(base_op.from_limbs(a),
                                                          base_op.from_limbs(b))], ctx.num_limbs)


def test_generic_secret_ladder_has_a_fixed_schedule():
    # Same limb count, very different values (sparse, dense, zero windows): the sequence of
    # MontMults must not change.  The sliding-window mod_exp, for contrast, does change.
    ctx = mont_context(M1024)
    base = _rows(ctx, 3)
    counts, plain_counts = set(), set()
    for e in (1 << 127, (1 << 128) - 1, (1 << 127) | 1, 0x8000_0000_0000_0000_0000_0000_0000_000F):
        be = _MontOnly()
        out = mod_op.mod_exp_secret(be, ctx, base, mod_op.exp_limbs(e))
        assert base_op.from_limbs(out) == [pow(b, e, ctx.m) for b in base_op.from_limbs(base)]
        counts.add(be.calls)
        be = _MontOnly()
        mod_op.mod_exp(be, ctx, base, mod_op.exp_limbs(e))
        plain_counts.add(be.calls)
    assert len(counts) == 1
    assert len(plain_counts) > 1


def test_qat_cpu_share_of_secret_exponents_is_consttime(monkeypatch):
    if not registry.probe("qat").available:
        pytest.skip(registry.probe("qat").reason)
    from unifl.backends.qat import QatBackend
    qat = QatBackend(cpu_share=0.5)
    qat.probe_result = registry.probe("qat")
    _, sk = paillier_keypair(1024)
    secret = _spy_native(monkeypatch)
    plain = _Spy(_native.mod_exp, 2)
    monkeypatch.setattr(_native, "mod_exp", plain)
    ctx = sk.psquare_ctx
    base = _rows(ctx, 16)
    got = mod_op.mod_exp_secret(qat, ctx, base, mod_op.exp_limbs(sk.p - 1))
    assert base_op.from_limbs(got) == [pow(b, sk.p - 1, ctx.m) for b in base_op.from_limbs(base)]
    assert sk.p - 1 in secret.exps
    assert sk.p - 1 not in plain.exps
