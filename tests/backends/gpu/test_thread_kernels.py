"""The gpu backend's CUDA kernel bodies, run on the host CPU by the harness compiled from the same
source (``unifl.backends.gpu._gpu_host``) and, where a GPU exists, as CUDA kernels on the device,
against ``cpu`` / Python ints / python-paillier.

Both batch layouts are exercised: limb-major (what the CUDA runtime stages on the device) and
element-major (the canonical host layout), so index arithmetic is checked, not only the arithmetic.
The full cross-backend harness (tests/backends/test_equivalence.py) also runs these bodies as ``gpu_host``.
"""

from __future__ import annotations

import secrets

import numpy as np
import phe
import pytest

from unifl.mod_op import ints
import unifl
from unifl import base_op, mod_op
from unifl.core import registry
from unifl.backends.gpu import keys
from unifl.backends.gpu.host import GpuHostBackend, _gpu_host
from unifl.base_op import from_limbs, mont_context, mont_mul_ref, to_limbs
from unifl.core.errors import OperandError
from unifl.phe_sdk import EncryptedArray, paillier

from tests.helpers.keys import paillier_keypair, random_odd_modulus

LAYOUTS = {"limb-major": True, "element-major": False}
NO_HOST = pytest.mark.skipif(_gpu_host is None, reason="gpu host harness not built")
GPU = registry.probe("gpu")
NEEDS_GPU = pytest.mark.skipif(not GPU.available, reason=f"gpu backend unavailable: {GPU.reason}")


KERNELS = ("thread", "group")


#: the cooperative kernels' tunings checked on the device besides the defaults (window chosen by
#: occupancy, shape by batch size): every window, and the wide shape forced (the host harness
#: checks the same variants in tests/backends/gpu/test_group_kernels.py)
CUDA_TUNINGS = {"w3": {"window": 3}, "w4": {"window": 4}, "w5": {"window": 5},
                "wide": {"lanes": "wide"}, "normal": {"lanes": "normal"}}


@pytest.fixture(scope="module",
                params=[pytest.param((lay, k, {}), marks=NO_HOST, id=f"{lay}-{k}")
                        for lay in LAYOUTS for k in KERNELS]
                + [pytest.param(("cuda", k, {}), marks=[pytest.mark.gpu, NEEDS_GPU], id=f"cuda-{k}")
                   for k in KERNELS]
                + [pytest.param(("cuda", "group", opts), marks=[pytest.mark.gpu, NEEDS_GPU],
                                id=f"cuda-group-{name}") for name, opts in CUDA_TUNINGS.items()])
def kern(request):
    """Both kernel families (one thread per instance; cooperative groups) on the host CPU in both
    batch layouts and, where a GPU exists, as CUDA kernels on the device (``cuda``, the cooperative
    ones also with each tuning), each checked by the same assertions."""
    where, kernels, opts = request.param
    if where == "cuda":
        return unifl.backend("gpu", kernels=kernels, **opts)
    be = GpuHostBackend(soa=LAYOUTS[where], threads=2, kernels=kernels)
    be.probe_result = GpuHostBackend.probe()
    return be


@pytest.fixture(scope="module")
def cpu():
    return unifl.backend("cpu")


def _edges(m: int, n: int) -> list[int]:
    return [0, 1, 2, m - 1, m - 2, ((1 << 64) - 1) % m] + [secrets.randbelow(m) for _ in range(n)]


@pytest.mark.parametrize("bits", [64, 65, 1000, 1024, 1536, 2048, 2050, 3072, 4096, 8192])
def test_mont_mul_mod_mul(kern, bits):
    m = random_odd_modulus(bits)
    a = _edges(m, 40)
    b = a[::-1]
    assert ints.mont_mul(kern, a, b, m) == [mont_mul_ref(x, y, m) for x, y in zip(a, b)]
    assert ints.mont_mul(kern, a, a, m) == [mont_mul_ref(x, x, m) for x in a]      # aliased squaring
    assert ints.mod_mul(kern, a, b, m) == [x * y % m for x, y in zip(a, b)]


def test_every_size_class_boundary(kern):
    """Moduli of L limbs at both ends of every class (16, 32, 48, 64, 96, 128 limbs) and just past
    them: the kernels run L-limb loops inside an LMAX-limb class, R = 2^(64·L) exactly."""
    for limbs in (1, 15, 16, 17, 31, 32, 33, 48, 49, 64, 65, 96, 97, 127, 128):
        for bits in (64 * limbs, 64 * limbs - 63):
            if bits < 2:
                continue
            m = random_odd_modulus(max(bits, 3))
            a = _edges(m, 4)
            assert ints.mont_mul(kern, a, a[::-1], m) == [mont_mul_ref(x, y, m)
                                                   for x, y in zip(a, a[::-1])], bits
    if _gpu_host is not None:
        assert {_gpu_host.lmax_class(L) for L in range(1, 129)} == {16, 32, 48, 64, 96, 128}
        assert _gpu_host.lmax_class(129) == 0


@pytest.mark.parametrize("bits", [64, 1000, 1536, 2048, 2050])   # 3072/4096: equivalence harness
def test_mod_exp_edges(kern, bits):
    m = random_odd_modulus(bits)
    base = _edges(m, 6)
    huge = secrets.randbits(2 * bits) | (1 << (2 * bits - 1))   # longer than m
    exps = [0, 1, 2, m - 1, huge, (1 << 64) - 1] + [secrets.randbits(secrets.choice([5, 64, 200]))
                                                    for _ in range(len(base) - 6)]
    assert ints.mod_exp(kern, base, exps, m) == [pow(x, e, m) for x, e in zip(base, exps)]
    for shared in (0, 1, huge):
        assert ints.mod_exp(kern, base, shared, m) == [pow(x, shared, m) for x in base]


def test_mont_exp_stays_in_domain(kern, cpu):
    ctx = mont_context(random_odd_modulus(2048))
    x = base_op.to_mont(cpu, ctx, ctx.to_limbs(_edges(ctx.m, 10)))
    e = mod_op.exp_limbs([0, 1, 7, ctx.m + 5] + [secrets.randbits(300) for _ in range(12)])
    assert np.array_equal(kern.op_mont_exp(ctx, x, e), mod_op.mont_exp(cpu, ctx, x, e))


@pytest.mark.parametrize("n", [1, 2, 7, 16])
def test_multi_exp_tree_reduction(kern, cpu, n):
    """Alg. 5: K·N powers, then the halving rounds over N on the device (odd and even N)."""
    ctx = mont_context(random_odd_modulus(1024))
    x = base_op.to_mont(cpu, ctx, ctx.to_limbs(_edges(ctx.m, 10)[:n]))
    k = 3
    ex = mod_op.exp_limbs([secrets.randbits(secrets.choice([0, 1, 40, 130])) for _ in range(k * n)])
    ex = ex.reshape(k, n, -1)
    ex[1] = 0
    assert np.array_equal(kern.op_mont_multi_exp(ctx, x, ex),
                          mod_op.mont_multi_exp(cpu, ctx, x, ex))


@pytest.mark.parametrize("bits", [1024, 2048])
def test_fused_paillier_encrypt_matches_python_paillier(kern, cpu, bits):
    pk, sk = paillier_keypair(bits)
    ms = [0, 1, pk.n - 1, pk.max_int] + [secrets.randbelow(pk.n) for _ in range(4)]
    rs = [1, pk.n - 1] + [secrets.randbelow(pk.n - 1) + 1 for _ in range(len(ms) - 2)]
    got = pk.raw_encrypt(ms, backend=kern, r_values=rs)
    assert got == pk.raw_encrypt(ms, backend=cpu, r_values=rs)
    ppk = phe.PaillierPublicKey(pk.n)
    assert got == [ppk.raw_encrypt(m, r_value=r) for m, r in zip(ms, rs)]
    assert sk.raw_decrypt(got, backend=kern) == ms
    # the fused kernel itself returns Montgomery form mod n²
    c_mont = kern.op_paillier_encrypt(pk.material, pk.plaintext_limbs(ms), pk.n_ctx.to_limbs(rs))
    assert from_limbs(base_op.from_mont(cpu, pk.nsquare_ctx, c_mont)) == got


@pytest.mark.parametrize("bits", [1024, 2048])
def test_fused_owner_encrypt_matches_the_composition(kern, cpu, bits):
    """The key-owner kernel (both CRT halves, Garner's combine, the finish) against the generic
    composition on cpu, for the same y_p, y_q; and its ciphertexts decrypt."""
    pk, sk = paillier_keypair(bits)
    mat = sk.material
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(5)]
    yp = to_limbs([1, sk.p - 1] + [secrets.randbelow(sk.p - 1) + 1 for _ in range(6)], mat.p_limbs)
    yq = to_limbs([sk.q - 1, 1] + [secrets.randbelow(sk.q - 1) + 1 for _ in range(6)], mat.q_limbs)
    m = pk.plaintext_limbs(ms)
    got = kern.op_paillier_encrypt_owner(mat, m, yp, yq)
    assert np.array_equal(np.asarray(got), np.asarray(paillier.paillier_encrypt_owner(cpu, mat, m,
                                                                                      yp, yq)))
    assert from_limbs(paillier.decrypt_limbs(kern, sk, got)) == ms


def test_crt_decrypt_of_foreign_ciphertexts(kern):
    """Ciphertexts made by python-paillier (random r) decrypt to the same plaintexts."""
    pk, sk = paillier_keypair(1024)
    ppk = phe.PaillierPublicKey(pk.n)
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(5)]
    cs = [ppk.raw_encrypt(m) for m in ms]
    assert sk.raw_decrypt(cs, backend=kern) == ms


def test_encrypted_matmul_and_homomorphic_ops(kern):
    pk, sk = paillier_keypair(1024)
    rng = np.random.default_rng(7)
    x = rng.integers(-1000, 1000, size=(6, 1))
    w = rng.integers(-50, 50, size=(4, 6))
    e = EncryptedArray.encrypt(pk, x.astype(object), backend=kern)
    assert [list(r) for r in (w.astype(object) @ e).decrypt(sk)] == [list(r) for r in w @ x]
    assert list((e + e).decrypt(sk).ravel()) == list((2 * x).ravel())        # ct add = MontMult
    assert list((e * 3).decrypt(sk).ravel()) == list((3 * x).ravel())        # ct×scalar = mont_exp


def test_blob_layout_round_trip():
    """The Python key blobs and the C parser agree (sizes recorded where the kernels read them)."""
    pk, sk = paillier_keypair(1024)
    blob = keys.priv_blob(sk)
    assert int(blob[-1]) == pk.n_ctx.num_limbs
    ctx_b = keys.ctx_blob(pk.nsquare_ctx)
    L2 = pk.nsquare_ctx.num_limbs
    assert int(ctx_b[1]) == L2 and ctx_b.size == 2 + 3 * L2
    pub = keys.pub_blob(pk)
    assert int(pub[ctx_b.size]) == pk.n_ctx.num_limbs
    assert from_limbs(pub[ctx_b.size + 1:][None, :]) == [pk.n]


def test_moduli_wider_than_8192_bits_are_refused(kern):
    m = random_odd_modulus(8193)
    with pytest.raises(OperandError, match="8192 bits"):
        ints.mont_mul(kern, [1], [2], m)


def test_crt_decrypt_with_unbalanced_primes(kern, cpu):
    """p and q of different limb counts (8 and 10): the wide reductions c mod p², c mod q² and
    m_q mod p then take more than one chunk."""
    from unifl.phe_sdk.paillier import PrivateKey
    from unifl.phe_sdk.primes import random_prime
    sk = PrivateKey(random_prime(480), random_prime(600))
    pk = sk.public_key
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(5)]
    rs = [secrets.randbelow(pk.n - 1) + 1 for _ in ms]
    cs = pk.raw_encrypt(ms, backend=kern, r_values=rs)
    assert cs == pk.raw_encrypt(ms, backend=cpu, r_values=rs)
    assert sk.raw_decrypt(cs, backend=kern) == ms


def test_selection_refuses_moduli_beyond_the_largest_size_class():
    """The kernels stop at the 8192-bit class: a request for a larger modulus (a Paillier key of
    4097+ bits has n² above it) is refused when the backend is chosen, naming the limit."""
    from unifl.backends.gpu import keys
    from unifl.backends.gpu.kernel_backend import KernelBackend
    from unifl.core.backend import Request
    assert KernelBackend.max_modulus_bits == 64 * keys.MAX_LIMBS == 8192
    be = registry.backend("gpu_host")
    assert be.supports(Request(modulus_bits=frozenset({8192})))
    support = be.supports(Request(modulus_bits=frozenset({8200})))
    assert not support and "8192 bits" in " ".join(support.reasons)
