"""Key-owner encryption with the CRT (ops ``paillier_encrypt_owner`` and
``paillier_encrypt_owner_fixed_base``): the generic composition (on cpu, on native without its
fused ops, on the gpu kernels without theirs), the fused native op and the fused gpu kernel body
(host harness, both batch layouts) give the same ciphertexts for the same randomness, equal to
``(1 + m·n)·CRT(yp^p mod p², yq^q mod q²) mod n²`` computed with Python ints; the ciphertexts
decrypt; an explicit r gives python-paillier's ciphertext; the DJN fixed base through the CRT equals
the full-size comb; and a fused batch costs one native call / one kernel launch, one upload, no
download.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time

import numpy as np
import phe
import pytest

import unifl
from unifl import base_op
from unifl.backends.gpu import _gpu_host, keys
from unifl.backends.gpu.host import GpuHostBackend
from unifl.backends.native import NativeBackend, _native
from unifl.base_op import from_limbs, to_limbs
from unifl.core.errors import KeyMismatchError, OperandError
from unifl.core.limbs import add_limbs, mod_add_limbs, mod_sub_limbs, sub_limbs
from unifl.phe_sdk import paillier as P
from unifl.phe_sdk.array import EncryptedArray
from unifl.phe_sdk.primes import random_prime
from unifl.scheduler.multi import MultiDeviceBackend

from tests.helpers.keys import paillier_keypair, paillier_keypair_without_generators

#: the fused key-owner ops (the generators' route among them: without it, a composed backend
#: composes y^p as keys without generators do)
OWNER_OPS = {"paillier_encrypt_owner", "paillier_encrypt_owner_fixed_base",
             "paillier_encrypt_owner_generator"}
NO_HOST = pytest.mark.skipif(_gpu_host is None, reason="gpu host harness not built")


class NativeComposed(NativeBackend):
    """native without its fused key-owner ops: the composition on native's ModExp/MontMult."""

    name = "native-composed"
    native_ops = NativeBackend.native_ops - OWNER_OPS


class GpuHostComposed(GpuHostBackend):
    """The gpu kernel bodies without the fused owner kernel: the composition on the kernels."""

    name = "gpu_host-composed"
    native_ops = GpuHostBackend.native_ops - OWNER_OPS


def _make(name: str):
    if name == "cpu":
        return unifl.backend("cpu")
    if name == "native":
        be = NativeBackend(threads=2)
    elif name == "native-composed":
        be = NativeComposed(threads=2)
    elif name == "gpu_host-limb-major":
        be = GpuHostBackend(soa=True, threads=2)
    elif name == "gpu_host-element-major":
        be = GpuHostBackend(soa=False, threads=2)
    else:
        be = GpuHostComposed(soa=True, threads=2)
    be.probe_result = type(be).probe()
    return be


BACKENDS = ["cpu", "native", "native-composed"] + [
    pytest.param(n, marks=NO_HOST)
    for n in ("gpu_host-limb-major", "gpu_host-element-major", "gpu_host-composed")]


@pytest.fixture(scope="module", params=BACKENDS)
def be(request):
    return _make(request.param)


@functools.lru_cache(maxsize=None)
def _key(kind: str):
    """Balanced keys of 1024/2048/3072 bits; "odd": 1042 bits (n, n² not limb-aligned);
    "unbalanced": primes of 480 and 600 bits (p², q² of 15 and 19 limbs, n² of 34)."""
    if kind == "odd":
        return P.PrivateKey(random_prime(520), random_prime(522))
    if kind == "unbalanced":
        return P.PrivateKey(random_prime(480), random_prime(600))
    return paillier_keypair(int(kind))[1]


KEYS = ["1024", "2048", "3072", "odd", "unbalanced"]


def _reference(sk, ms, yps, yqs) -> list[int]:
    """(1 + m·n)·CRT(yp^p mod p², yq^q mod q²) mod n² with Python ints (the CRT by the textbook
    formula, independent of the code's Garner orientation)."""
    n, p2, q2 = sk.public_key.n, sk.psquare, sk.qsquare
    n2 = n * n
    out = []
    for m, yp, yq in zip(ms, yps, yqs):
        xp, xq = pow(yp, sk.p, p2), pow(yq, sk.q, q2)
        x = (xp * q2 * pow(q2, -1, p2) + xq * p2 * pow(p2, -1, q2)) % n2
        out.append((1 + m * n) * x % n2)
    return out


def _plain(be, pk, c_mont) -> list[int]:
    return from_limbs(base_op.from_mont(unifl.backend("cpu"), pk.nsquare_ctx, np.asarray(c_mont)))


# ------------------------------------------------------------------ the op itself, every backend
@pytest.mark.parametrize("kind", KEYS)
def test_same_ciphertexts_on_every_backend_and_equal_to_python_ints(be, kind):
    sk = _key(kind)
    pk, mat = sk.public_key, sk.material
    count = 6 if kind == "3072" else 10
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(count - 3)]
    yps = [1, sk.p - 1] + [secrets.randbelow(sk.p - 1) + 1 for _ in range(count - 2)]
    yqs = [sk.q - 1, 1] + [secrets.randbelow(sk.q - 1) + 1 for _ in range(count - 2)]
    c = P.paillier_encrypt_owner(be, mat, pk.plaintext_limbs(ms), to_limbs(yps, mat.p_limbs),
                                 to_limbs(yqs, mat.q_limbs))
    assert np.asarray(c).shape == (count, pk.nsquare_ctx.num_limbs)
    got = _plain(be, pk, c)
    assert got == _reference(sk, ms, yps, yqs)
    assert sk.raw_decrypt(got, backend="native") == ms


@pytest.mark.parametrize("kind", ["1024", "2048", "unbalanced"])
def test_explicit_r_gives_the_public_and_python_paillier_ciphertext(be, kind):
    """sk.raw_encrypt(m, r) goes through the owner op with y_p = r^q mod p, y_q = r^p mod q: the
    same (1 + m·n)·r^n mod n² as the public path and python-paillier, even for an r sharing a
    factor with n (r = p, r = q), which makes y_p or y_q zero."""
    sk = _key(kind)
    pk = sk.public_key
    ms = [0, 1, pk.n - 1, 7, secrets.randbelow(pk.n), secrets.randbelow(pk.n)]
    rs = [1, pk.n - 1, sk.p, sk.q] + [secrets.randbelow(pk.n - 1) + 1 for _ in range(2)]
    ppk = phe.PaillierPublicKey(pk.n)
    want = [ppk.raw_encrypt(m, r_value=r) for m, r in zip(ms, rs)]
    assert sk.raw_encrypt(ms, backend=be, r_values=rs) == want
    assert pk.raw_encrypt(ms, backend=be, r_values=rs) == want
    units = [i for i, r in enumerate(rs) if r not in (sk.p, sk.q)]
    assert sk.raw_decrypt([want[i] for i in units], backend=be) == [ms[i] for i in units]


@pytest.mark.parametrize("kind", ["1024", "2048", "odd", "unbalanced"])
def test_fixed_base_through_the_crt_equals_the_full_size_comb(be, kind):
    sk0 = _key(kind)
    sk = P.PrivateKey(sk0.p, sk0.q)                  # its own fixed base, own tables
    pk = sk.public_key
    pk.enable_fixed_base(window=4, backend="native")
    fb = pk.fixed_base
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(5)]
    a = [1, (1 << fb.exp_bits) - 1] + [secrets.randbits(fb.exp_bits) for _ in range(len(ms) - 2)]
    a_l = to_limbs(a, -(-fb.exp_bits // 64))
    m = pk.plaintext_limbs(ms)
    owner = P.paillier_encrypt_owner_fixed_base(be, sk.material, m, a_l)
    public = P.paillier_encrypt_fixed_base(be, pk.material, m, a_l)
    assert np.array_equal(np.asarray(owner), np.asarray(public))
    hs = _plain(be, pk, fb.hs_mont[None, :])[0]
    n2 = pk.nsquare
    assert _plain(be, pk, owner) == [(1 + x * pk.n) * pow(hs, e, n2) % n2 for x, e in zip(ms, a)]
    # an exponent longer than the tables cover is refused, not truncated
    too_long = to_limbs([1 << (-(-fb.exp_bits // 4) * 4)], -(-fb.exp_bits // 64) + 1)
    with pytest.raises(ValueError, match="exponent"):
        P.paillier_encrypt_owner_fixed_base(be, sk.material, m[:1], too_long)


def test_the_sdk_paths_of_the_key_owner_decrypt_and_are_fresh():
    """Fresh owner encryption (half-size y), the owner's fixed base, EncryptedArray with
    ``private_key=``, and the pool: all decrypt; fresh ciphertexts of equal plaintexts differ."""
    _, sk0 = paillier_keypair(1024)
    sk = P.PrivateKey(sk0.p, sk0.q)
    pk = sk.public_key
    ms = [5, 5, 5, 0, pk.n - 1]
    for name in ("cpu", "native"):
        c = sk.raw_encrypt(ms, backend=name)
        assert len(set(c[:3])) == 3 and sk.raw_decrypt(c, backend=name) == ms
    x = np.array([0.25, -3.5, 1e6])
    assert np.allclose(EncryptedArray.encrypt(pk, x, private_key=sk, backend="native")
                       .decrypt(sk), x)
    pk.enable_fixed_base(window=6, backend="native")
    for name in ("cpu", "native"):
        c = sk.raw_encrypt(ms, backend=name)
        assert len(set(c[:3])) == 3 and sk.raw_decrypt(c, backend=name) == ms
    with pytest.raises(KeyMismatchError):
        P.encrypt_limbs(unifl.backend("native"), pk, pk.plaintext_limbs([1]), private_key=_key("2048"))


# ------------------------------------------------------------------ dispatch and cost per batch
def test_native_runs_one_fused_call_per_batch(monkeypatch):
    """A key without proven generators (keys made elsewhere): y^p in one fused call (keys of
    ``keygen`` take the generator op: test_owner_generators.py)."""
    pk, sk = paillier_keypair_without_generators(2048)
    be = _make("native")
    calls: list[str] = []
    for op in ("op_paillier_encrypt_owner", "op_mod_exp_secret", "op_mont_mul", "op_mod_exp"):
        real = getattr(NativeBackend, op)

        def spy(self, *args, _real=real, _op=op):
            calls.append(_op)
            return _real(self, *args)
        monkeypatch.setattr(NativeBackend, op, spy)
    m = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(20)])
    c = P.encrypt_limbs(be, pk, m, use_pool=False, private_key=sk)
    assert calls == ["op_paillier_encrypt_owner"]
    assert from_limbs(P.decrypt_limbs(be, sk, c)) == from_limbs(m)


@NO_HOST
@pytest.mark.parametrize("bits", [1024, 2048])
def test_a_fused_gpu_batch_is_one_launch_one_upload_no_download(bits):
    """On the host harness modelling the device's memory: the fused owner encryption of a fresh
    batch (the generators' kernel, as keys from keygen have them) is 1 kernel launch, 1 upload (m,
    kp, kq staged together), 0 downloads; the result is read back once when used on the host.  The
    composition on the same kernels (y^p) needs several launches and round trips (its combine runs
    on the host)."""
    pk, sk = paillier_keypair(bits)
    m = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(33)])
    cost = {}
    for cls in (GpuHostBackend, GpuHostComposed):
        be = cls(threads=2, resident=True)
        be.probe_result = GpuHostBackend.probe()
        P.encrypt_limbs(be, pk, m[:2], use_pool=False, private_key=sk)    # key blobs uploaded
        before = be.engine.counters()
        c = P.encrypt_limbs(be, pk, m, use_pool=False, private_key=sk)
        after = be.engine.counters()
        cost[cls.name] = {k: after[k] - before[k] for k in before}
        assert not c.fetched
        assert from_limbs(P.decrypt_limbs(unifl.backend("native"), sk, np.asarray(c))) == from_limbs(m)
        assert be.engine.counters()["downloads"] == after["downloads"] + 1
    assert cost["gpu_host"] == {"launches": 1, "uploads": 1, "downloads": 0}
    composed = cost["gpu_host-composed"]
    assert composed["launches"] >= 5 and composed["downloads"] >= 2, composed


def test_the_multi_device_wrapper_splits_the_owner_ops_by_rows():
    pk, sk = paillier_keypair(1024)
    single = _make("native")
    multi = MultiDeviceBackend([_make("native"), _make("native")], min_rows=1)
    assert multi.implements("paillier_encrypt_owner")
    mat = sk.material
    m = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(9)])
    yp = P.random_limbs(9, sk.p.bit_length(), sk.p)
    yq = P.random_limbs(9, sk.q.bit_length(), sk.q)
    assert np.array_equal(np.asarray(multi.op_paillier_encrypt_owner(mat, m, yp, yq)),
                          single.op_paillier_encrypt_owner(mat, m, yp, yq))


def test_native_owner_tables_are_built_once_per_record(monkeypatch):
    """Eight threads meet a fresh fixed base at once: the owner's CRT combs are built once per
    backend instance and key record; a new fixed base (a new record) builds new ones."""
    _, sk0 = paillier_keypair(1024)
    sk = P.PrivateKey(sk0.p, sk0.q)
    pk = sk.public_key
    pk.enable_fixed_base(window=4, exp_bits=256, backend="native")
    builds = []
    real = NativeBackend._build_owner_fixed_base

    def slow_build(self, priv, fb):
        builds.append(fb)
        time.sleep(0.05)                         # widen the window in which a racer would rebuild
        real(self, priv, fb)
    monkeypatch.setattr(NativeBackend, "_build_owner_fixed_base", slow_build)
    be = _make("native")
    results: list = [None] * 8
    errors: list = []
    barrier = threading.Barrier(8)

    def work(k: int) -> None:
        try:
            barrier.wait()
            results[k] = P.encrypt_limbs(be, pk, pk.plaintext_limbs([k, k + 100]), use_pool=False,
                                         private_key=sk)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(builds) == 1
    for k in range(8):
        assert from_limbs(P.decrypt_limbs(be, sk, results[k])) == [k, k + 100]
    pk.enable_fixed_base(window=4, exp_bits=256, backend="native")
    P.encrypt_limbs(be, pk, pk.plaintext_limbs([1]), use_pool=False, private_key=sk)
    assert len(builds) == 2


# ------------------------------------------------------------------ refusals
def test_malformed_owner_arguments_are_refused():
    pk, sk = paillier_keypair(1024)
    mat = sk.material
    m = pk.plaintext_limbs([1, 2])
    yp, yq = to_limbs([3, 4], mat.p_limbs), to_limbs([5, 6], mat.q_limbs)
    native = _make("native")
    with pytest.raises(ValueError, match=r"'yp' must have shape \(2, 8\), got \(1, 8\)"):
        native.op_paillier_encrypt_owner(mat, m, yp[:1], yq)
    with pytest.raises(ValueError, match=r"'yq' must have shape \(2, 8\), got \(2, 16\)"):
        native.op_paillier_encrypt_owner(mat, m, yp, to_limbs([5, 6], 16))
    with pytest.raises(OperandError, match="no DJN fixed base"):
        native.op_paillier_encrypt_owner_fixed_base(mat, m, to_limbs([1, 2], 8))
    with pytest.raises(OperandError, match="no DJN fixed base"):
        P.paillier_encrypt_owner_fixed_base(unifl.backend("cpu"), mat, m, to_limbs([1, 2], 8))
    if _gpu_host is not None:
        blob = keys.owner_blob(mat)
        with pytest.raises(ValueError, match="'key' is truncated"):
            _gpu_host.paillier_encrypt_owner(np.ascontiguousarray(blob[:-3]), m, yp, yq, True, 1)
        with pytest.raises(ValueError, match=r"'yp' must have shape \(2, 8\)"):
            _gpu_host.paillier_encrypt_owner(blob, m, to_limbs([3], 8), yq, True, 1)
        lying = blob.copy()
        lying[1] = 7                             # n²'s context claims 7 limbs: sizes disagree
        with pytest.raises(ValueError, match="'key'"):
            _gpu_host.paillier_encrypt_owner(lying, m, yp, yq, True, 1)
    # the C++ object refuses a private part that does not belong to the public key
    with pytest.raises(ValueError, match="does not square"):
        L = pk.n_ctx.num_limbs
        _native.PaillierPrivate(native._pub(mat.public_key), native.modulus(mat.psquare_ctx),
                                native.modulus(mat.qsquare_ctx),
                                *[to_limbs([v], L)[0] for v in (sk.q, sk.q, sk.hp, sk.hq,
                                                                  sk.q_inverse)])


# ------------------------------------------------------------------ host helpers
def test_random_limbs_are_uniform_in_range():
    vals = from_limbs(P.random_limbs(40_000, 3, 5))          # uniform in [1, 5)
    counts = np.bincount(vals, minlength=5)
    assert counts[0] == 0 and all(abs(c - 10_000) < 500 for c in counts[1:])  # > 5 sigma apart
    _, sk = paillier_keypair(1024)
    ys = from_limbs(P.random_limbs(2000, sk.p.bit_length(), sk.p))
    assert all(0 < y < sk.p for y in ys) and len(set(ys)) == 2000
    assert max(ys).bit_length() == sk.p.bit_length()         # the top limb is drawn too
    a = from_limbs(P.random_limbs(2000, 512))
    assert all(0 < x < 1 << 512 for x in a) and max(a).bit_length() == 512


def test_host_limb_arithmetic_matches_python_ints():
    L = 5
    top = (1 << 64 * L) - 1
    m = secrets.randbits(64 * L - 3) | 1 << (64 * L - 4)
    edge = [0, 1, top, top - 1, (1 << 64) - 1, ((1 << 64) - 1) << 64, m - 1, m]
    xs = edge + [secrets.randbits(64 * L) for _ in range(40)]
    ys = edge[::-1] + [secrets.randbits(64 * L) for _ in range(40)]
    a, b = to_limbs(xs, L), to_limbs(ys, L)
    s, carry = add_limbs(a, b)
    assert from_limbs(s) == [(x + y) % (top + 1) for x, y in zip(xs, ys)]
    assert list(carry) == [x + y > top for x, y in zip(xs, ys)]
    d, borrow = sub_limbs(a, b)
    assert from_limbs(d) == [(x - y) % (top + 1) for x, y in zip(xs, ys)]
    assert list(borrow) == [x < y for x, y in zip(xs, ys)]
    xr, yr = [x % m for x in xs], [y % m for y in ys]
    ml = to_limbs([m], L)[0]
    ar, br = to_limbs(xr, L), to_limbs(yr, L)
    assert from_limbs(mod_add_limbs(ar, br, ml)) == [(x + y) % m for x, y in zip(xr, yr)]
    assert from_limbs(mod_sub_limbs(ar, br, ml)) == [(x - y) % m for x, y in zip(xr, yr)]
