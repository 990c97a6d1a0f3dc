"""Data residency: results of a backend that keeps them in device memory
(``unifl.base_op.DeviceBatch``) stay there across chained SDK calls until something fetches them.

Two parts:
* the layers' side, on any machine: ``resident_cpu`` is a test-only backend whose every result is a
  DeviceBatch kept in a private store (no device; it counts fetches), so the tests can check that the
  layers pass such batches through without fetching them, that every consumer that needs values gets
  them, and that the cached host copy is read-only;
* the real thing, marked ``gpu``: the same chains on the CUDA backend, with the results compared
  bit for bit with ``cpu`` and the intermediate batches checked to be still unfetched.
"""

from __future__ import annotations

import secrets

import numpy as np
import pytest

import unifl
from unifl import base_op, mod_op
from unifl.core import registry
from unifl.backends.cpu import CpuBackend
from unifl.base_op import DeviceBatch, from_limbs, mont_context
from unifl.phe_sdk import EncryptedArray, serialize

from tests.helpers.keys import paillier_keypair, random_odd_modulus


class StoredBatch(DeviceBatch):
    """A DeviceBatch whose 'device' is a private host array; counts how often it is fetched."""

    fetches = 0

    def __init__(self, values: np.ndarray) -> None:
        super().__init__(values.shape)
        self._store = np.array(values, dtype=np.uint64, copy=True)

    def _download(self) -> np.ndarray:
        StoredBatch.fetches += 1
        return self._store.copy()


class ResidentCpu(CpuBackend):
    """cpu arithmetic, but results stay 'on the device' (StoredBatch) and its own batches are used
    in place -- the contract a device-resident backend follows, without a device."""

    name = "resident_cpu"
    native_ops = frozenset({"mont_mul"})      # everything else composed from it by the layers

    def own_batch(self, x):
        if isinstance(x, StoredBatch):
            return x
        return super().own_batch(x)

    def _in(self, x):
        return x._store if isinstance(x, StoredBatch) else np.ascontiguousarray(x, np.uint64)

    def op_mont_mul(self, ctx, a, b):
        return StoredBatch(super().op_mont_mul(ctx, self._in(a), self._in(b)))


@pytest.fixture
def resident():
    StoredBatch.fetches = 0
    be = ResidentCpu()
    be.probe_result = CpuBackend.probe()
    return be


def test_device_batch_protocol():
    vals = np.arange(12, dtype=np.uint64).reshape(4, 3)
    b = StoredBatch(vals)
    StoredBatch.fetches = 0
    assert b.shape == (4, 3) and len(b) == 4 and b.ndim == 2 and not b.fetched
    assert np.array_equal(np.asarray(b), vals) and b.fetched
    assert np.array_equal(b[1:3], vals[1:3]) and from_limbs(b) == from_limbs(vals)
    assert StoredBatch.fetches == 1                         # fetched once, then cached
    with pytest.raises(ValueError):
        np.asarray(b)[0, 0] = 7                             # the cache is read-only
    c = b.copy()
    c[0, 0] = 7                                             # a copy is the caller's own
    assert np.asarray(b)[0, 0] == 0


def test_chain_stays_resident_until_fetched(resident):
    """MontMult chains (ciphertext additions, into/out of the domain) never fetch intermediate
    batches, and the end result equals cpu's."""
    cpu = unifl.backend("cpu")
    ctx = mont_context(random_odd_modulus(1024))
    x = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(50)])
    y = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(50)])
    got = base_op.to_mont(resident, ctx, x)
    got = base_op.mont_mul(resident, ctx, got, base_op.to_mont(resident, ctx, y), checked=False)
    got = mod_op.mod_mul(resident, ctx, base_op.from_mont(resident, ctx, got), y)
    assert isinstance(got, StoredBatch) and StoredBatch.fetches == 0
    want = mod_op.mod_mul(cpu, ctx, mod_op.mod_mul(cpu, ctx, x, y), y)
    assert np.array_equal(np.asarray(got), want) and StoredBatch.fetches == 1


def test_foreign_backend_and_checks_fetch(resident):
    """A batch used by another backend, or a shape that does not fit, is handled, not passed on."""
    cpu = unifl.backend("cpu")
    ctx = mont_context(random_odd_modulus(512))
    x = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(8)])
    on_dev = base_op.to_mont(resident, ctx, x)
    back = base_op.from_mont(cpu, ctx, on_dev)               # cpu fetches it through __array__
    assert np.array_equal(back, x) and StoredBatch.fetches == 1
    other = mont_context(random_odd_modulus(1024))
    with pytest.raises(unifl.OperandError, match="expected shape"):
        base_op.mont_mul(resident, other, on_dev, on_dev)


def test_encrypted_array_keeps_limbs_resident(resident):
    pk, sk = paillier_keypair(1024)
    x = np.array([3, -5, 7, 11])
    e = EncryptedArray.encrypt(pk, x, backend=resident)
    s = e + e
    assert isinstance(s.limbs, StoredBatch) and not s.limbs.fetched
    assert list(s.decrypt(sk)) == list(2 * x)
    # serialisation and indexing fetch; values survive
    blob = serialize.array_to_bytes(s)
    assert list(serialize.array_from_bytes(blob, pk).decrypt(sk)) == list(2 * x)
    assert list(s[1:3].decrypt(sk)) == list(2 * x[1:3])


# ------------------------------------------------------------------ on a real device (marked gpu)
GPU = registry.probe("gpu")
needs_gpu = pytest.mark.skipif(not GPU.available, reason=f"gpu backend unavailable: {GPU.reason}")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("n, bits", [(1, 64), (3, 1000), (257, 2048), (4099, 4096), (5, 8192)])
def test_upload_download_round_trip(n, bits):
    from unifl.backends.gpu.runtime import CudaEngine, GpuBatch
    eng = CudaEngine()
    L = -(-bits // 64)
    vals = np.frombuffer(secrets.token_bytes(n * L * 8), dtype=np.uint64).reshape(n, L)
    b = eng.upload(vals)
    assert isinstance(b, GpuBatch) and b.shape == (n, L) and not b.fetched
    assert np.array_equal(np.asarray(b), vals)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("bits", [1024, 2048])
def test_sdk_chain_on_the_device(bits):
    """encrypt -> + -> * k -> X @ e -> obfuscate -> decrypt: every intermediate stays on the GPU,
    and the plaintexts equal cpu's chain.  (Non-negative X: a negative multiplier needs the
    ciphertexts' inverses, which are composed with a host gcd and so fetch them -- checked below.)"""
    from unifl.backends.gpu.runtime import GpuBatch
    gpu, cpu = unifl.backend("gpu"), unifl.backend("cpu")
    pk, sk = paillier_keypair(bits)
    rng = np.random.default_rng(secrets.randbits(32))
    x = rng.integers(-10**6, 10**6, size=300)
    w = rng.integers(0, 100, size=(4, 300))
    outs = {}
    for name, be in (("gpu", gpu), ("cpu", cpu)):
        e = EncryptedArray.encrypt(pk, x, backend=be)
        s = (e + e) * 3
        y = (w @ s).obfuscate()
        if name == "gpu":
            for arr in (e, s, y):
                assert isinstance(arr.limbs, GpuBatch) and not arr.limbs.fetched, arr
        outs[name] = y.decrypt(sk)
    assert list(outs["gpu"]) == list(outs["cpu"]) == list(w @ (6 * x))
    e = EncryptedArray.encrypt(pk, x, backend=gpu)
    assert list((-w @ e).decrypt(sk)) == list(-w @ x)          # negative: fetched, still right


@pytest.mark.gpu
@needs_gpu
def test_device_results_mix_with_other_backends_and_frames():
    gpu, cpu = unifl.backend("gpu"), unifl.backend("cpu")
    pk, sk = paillier_keypair(1024)
    x = np.arange(-20, 20)
    e = EncryptedArray.encrypt(pk, x, backend=gpu)
    on_cpu = e.to(cpu) + 1                                    # cpu reads the device batch
    assert list(on_cpu.decrypt(sk)) == list(x + 1)
    frame = serialize.array_to_bytes(e * 2)                   # serialise from the device
    back = serialize.array_from_bytes(frame, pk, backend=gpu)  # and compute on it there again
    assert list((back + e).decrypt(sk)) == list(3 * x)
    assert list((-e).decrypt(sk)) == list(-x)                 # composed op (inverse) on a batch
    assert list(e.sum().decrypt(sk).ravel()) == [int(x.sum())]
