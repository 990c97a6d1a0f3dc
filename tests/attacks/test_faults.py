"""A backend that fails in the middle of a batch: the batch (or the failed piece of a split batch)
is re-run on the next backend of the party's fallback chain, once, with results bit-identical to
``cpu``; the failed backend is not used again; the report says what fell back from where to where
and why; caller errors are never re-run.

The failing backends are test-only subclasses of ``native`` (and of ``cpu`` for device-resident
results) registered by a fixture.  They do the real arithmetic and count, per instance, the elements
of every call that returned; a fault plan makes the k-th matching call raise before computing.
"""

from __future__ import annotations

import secrets
import threading
from collections import Counter

import numpy as np
import pytest

import unifl
from unifl import base_op, mod_op
from unifl.app import checkpoint
from unifl.app.jobs import run_local
from unifl.core import registry
from unifl.backends.cpu import CpuBackend
from unifl.backends.native import NativeBackend
from unifl.base_op import DeviceBatch
from unifl.configs import PartyConfig
from unifl.core.errors import (BackendUnavailable, DeviceDataLost, DeviceError,
                               EncodingOverflowError, InvalidCiphertextError, KeyMismatchError,
                               OperandError)
from unifl.scheduler import CountingBackend, MultiDeviceBackend, backend_from_config
from unifl.scheduler.counting import batch_elements
from unifl.scheduler.fallback import is_device_failure

from tests.helpers.keys import paillier_keypair, random_odd_modulus

pytestmark = pytest.mark.skipif(not registry.probe("native").available,
                                reason="the fault tests chain onto the native backend")

CPU = registry.backend("cpu")


# ------------------------------------------------------------------ fault-injecting backends
class FaultPlan:
    """Make the ``at``-th call (1-based, counted from arming) of ``op`` (None: any op) on instance
    ``instance`` (None: any) raise ``exc``; with ``keep_failing`` every later matching call too."""

    def __init__(self, exc: BaseException, at: int = 1, op: str | None = None,
                 instance: int | None = None, keep_failing: bool = False) -> None:
        self.exc, self.at, self.op, self.instance = exc, at, op, instance
        self.keep_failing = keep_failing
        self.matched = 0
        self.fired_at_call: int | None = None


class FaultMixin:
    """Counts completed elements per op and instance, and fails as the class's plan says."""

    plan: FaultPlan | None = None
    instances: list = []
    calls = 0                 # every op call that reached any instance of the class

    def _setup_faults(self) -> None:
        cls = type(self)
        self.index = len(cls.instances)
        cls.instances.append(self)
        self.computed: Counter = Counter()
        self.calls_seen = 0

    def _maybe_fail(self, op: str) -> None:
        cls = type(self)
        with _lock:
            cls.calls += 1
            self.calls_seen += 1
            plan = cls.plan
            if plan is None or (plan.op is not None and plan.op != op) or \
                    (plan.instance is not None and plan.instance != self.index):
                return
            plan.matched += 1
            fire = plan.matched == plan.at or (plan.keep_failing and plan.matched > plan.at)
            if fire and plan.fired_at_call is None:
                plan.fired_at_call = cls.calls
        if fire:
            raise plan.exc


_lock = threading.Lock()


def _faulty(op: str, base: type):
    def method(self, *args):
        self._maybe_fail(op)
        out = getattr(base, f"op_{op}")(self, *args)
        with _lock:
            self.computed[op] += batch_elements(op, args)
        return out
    method.__name__ = f"op_{op}"
    return method


class FaultyNative(FaultMixin, NativeBackend):
    name = "faulty"

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._setup_faults()


class FaultyNative2(FaultMixin, NativeBackend):
    name = "faulty2"

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._setup_faults()


for _cls in (FaultyNative, FaultyNative2):
    for _op in NativeBackend.native_ops:
        setattr(_cls, f"op_{_op}", _faulty(_op, NativeBackend))


class StoredBatch(DeviceBatch):
    """A result kept 'in device memory' (a private array); ``lost`` makes reading it back fail the
    way a fetch from a GPU whose context died does."""

    lost = False

    def __init__(self, values: np.ndarray) -> None:
        super().__init__(values.shape)
        self._store = np.array(values, dtype=np.uint64, copy=True)

    def _download(self) -> np.ndarray:
        if StoredBatch.lost:
            raise RuntimeError("CUDA error 700: an illegal memory access was encountered")
        return self._store.copy()


class FaultyResident(FaultMixin, CpuBackend):
    """cpu MontMults whose results stay on the 'device' (the residency contract of gpu)."""

    name = "faulty_resident"
    native_ops = frozenset({"mont_mul"})

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._setup_faults()

    def own_batch(self, x):
        return x if isinstance(x, StoredBatch) else super().own_batch(x)

    def op_mont_mul(self, ctx, a, b):
        self._maybe_fail("mont_mul")
        a = a._store if isinstance(a, StoredBatch) else a
        b = b._store if isinstance(b, StoredBatch) else b
        out = StoredBatch(CpuBackend.op_mont_mul(self, ctx, np.ascontiguousarray(a),
                                                 np.ascontiguousarray(b)))
        with _lock:
            self.computed["mont_mul"] += a.shape[0]
        return out


FAULTY = (FaultyNative, FaultyNative2, FaultyResident)


@pytest.fixture
def faulty():
    for cls in FAULTY:
        registry.register(cls.name, cls)
        cls.plan, cls.instances, cls.calls = None, [], 0
    StoredBatch.lost = False
    yield
    for cls in FAULTY:
        cls.plan, cls.instances = None, []
        registry._classes.pop(cls.name, None)
        registry._probes.pop(cls.name, None)
        registry._instances.pop(cls.name, None)
    StoredBatch.lost = False


def chain(primary: str = "faulty", fallback=("native", "cpu"), **kw):
    return backend_from_config(PartyConfig(party="guest", backend=primary, fallback=list(fallback),
                                           **kw))


def rows_for(be, op: str) -> list[dict]:
    return [r for r in be.report() if r["op"] == op]


# ------------------------------------------------------------------ whole batch falls back
@pytest.mark.parametrize("exc", [
    DeviceError("fpga Intel(R) FPGA / pac_a10: OpenCL clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES"),
    RuntimeError("CUDA error 700: an illegal memory access was encountered"),
    OSError(5, "Input/output error"),
    BackendUnavailable("QAT instance 0 went away"),
    MemoryError("out of device memory"),
], ids=lambda e: type(e).__name__)
def test_encrypt_decrypt_fall_back_mid_run_bit_identical(faulty, exc):
    pk, sk = paillier_keypair(1024)
    be = chain()
    assert isinstance(be, CountingBackend) and be.selection.chosen == "faulty"
    assert be.chain.links == [be]                      # nothing else started for an honest run
    dev = FaultyNative.instances[0]
    FaultyNative.plan = plan = FaultPlan(exc, at=2, op="paillier_encrypt")
    batches = []
    for size in (6, 7, 5):                             # the 2nd batch fails mid-run
        vals = [secrets.randbelow(pk.n) for _ in range(size)]
        r = [secrets.randbelow(pk.n - 1) + 1 for _ in range(size)]
        got = pk.raw_encrypt(vals, backend=be, r_values=r)
        assert got == pk.raw_encrypt(vals, backend=CPU, r_values=r)
        batches.append((vals, got))
    for vals, ct in batches:                           # decrypt runs on the fallback, right values
        assert sk.raw_decrypt(ct, backend=be) == vals

    # each element computed once: batch 1 on faulty, batches 2 and 3 on native
    assert dev.computed["paillier_encrypt"] == 6 and "paillier_decrypt" not in dev.computed
    assert FaultyNative.calls == plan.fired_at_call   # retired: nothing reached it after the fault
    enc = {(r["backend"], r.get("fallback_from") is not None): r for r in rows_for(be, "paillier_encrypt")}
    failed = enc[("faulty", False)]
    assert failed["elements"] == 6 and failed["failed_calls"] == 1 and failed["failed_elements"] == 7
    assert failed["fell_back_to"].startswith("native") and type(exc).__name__ in failed["reason"]
    took_over = enc[("native", True)]
    assert took_over["elements"] == 12 and took_over["fallback_from"].startswith("faulty")
    assert failed["elements"] + took_over["elements"] == 18
    ev, = be.selection.runtime_fallbacks
    assert (ev["op"], ev["from"], ev["to"], ev["elements"], ev["scope"]) == \
        ("paillier_encrypt", "faulty", "native", 7, "batch")
    assert be.fallback_events() == [ev]
    assert be.implements("paillier_decrypt")           # now answers for native


def test_matmul_chain_falls_back_twice_to_cpu(faulty):
    # faulty dies in the first multi-exponentiation, faulty2 (the next link) in its first one too:
    # the matmul lands on cpu, composed there, and the chain's result equals cpu's bit for bit
    pk, sk = paillier_keypair(1024)
    be = chain(fallback=("faulty2", "cpu"))
    x = np.linspace(-2.0, 2.0, 12)
    w = np.arange(12 * 3, dtype=float).reshape(12, 3) / 7 - 2
    ex = unifl.EncryptedArray.encrypt(pk, x, backend=CPU)
    want = (ex @ w) * 3 + ex[:3]
    FaultyNative.plan = FaultPlan(RuntimeError("driver reset"), op="mont_multi_exp")
    FaultyNative2.plan = FaultPlan(OSError("card gone"), op="mont_multi_exp")
    got = (ex.to(be) @ w) * 3 + ex[:3].to(be)
    assert np.array_equal(np.asarray(got.limbs), np.asarray(want.limbs))
    assert np.allclose(got.decrypt(sk), (x @ w) * 3 + x[:3], atol=1e-5)
    events = be.fallback_events()
    assert [(e["op"], e["from"], e["to"]) for e in events] == [
        ("mont_multi_exp", "faulty", "faulty2"), ("mont_multi_exp", "faulty2", "cpu")]
    assert FaultyNative.instances[0].computed["mont_multi_exp"] == 0
    assert FaultyNative2.instances[0].computed["mont_multi_exp"] == 0
    rows = be.report()
    f2 = [r for r in rows if r["backend"] == "faulty2" and r["op"] == "mont_multi_exp"]
    assert f2 and f2[0]["fell_back_to"].startswith("cpu") and "card gone" in f2[0]["reason"]
    assert f2[0]["fallback_from"].startswith("faulty")
    f1, = [r for r in rows if r["backend"] == "faulty" and r["op"] == "mont_multi_exp"]
    on_cpu, = [r for r in rows if r["backend"] == "cpu" and r["op"] == "mont_multi_exp"]
    assert f1["calls"] == 0 and f1["failed_elements"] == on_cpu["elements"] > 0


# ------------------------------------------------------------------ a piece of a split batch
@pytest.mark.parametrize("executor", ["serial", "threads"])
def test_failed_piece_of_split_batch_runs_once_on_fallback(faulty, executor):
    be = chain(devices=[{"threads": 1}, {"threads": 1}], executor=executor)
    assert isinstance(be, MultiDeviceBackend) and len(FaultyNative.instances) == 2
    d0, d1 = FaultyNative.instances
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    n = 32
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(n)])
    e = mod_op.exp_limbs([secrets.randbits(200) for _ in range(n)])
    FaultyNative.plan = FaultPlan(RuntimeError("ECC error on device 1"), op="mod_exp", instance=1)
    assert np.array_equal(mod_op.mod_exp(be, ctx, a, e), mod_op.mod_exp(CPU, ctx, a, e))
    native_rows = [r for r in rows_for(be, "mod_exp") if r["backend"] == "native"]
    # every element computed exactly once: device 0's piece kept, device 1's piece re-run once
    assert d0.computed["mod_exp"] == 16 and d1.computed["mod_exp"] == 0
    assert [r["elements"] for r in native_rows] == [16]
    assert d0.computed["mod_exp"] + d1.computed["mod_exp"] + native_rows[0]["elements"] == n
    ev, = be.fallback_events()
    assert ev["scope"] == "piece" and ev["elements"] == 16 and ev["from_device"].startswith("#1")
    assert be.live_members() == [0]
    # the next batch is split over what is left: all of it on device 0, nothing more on native
    seen1 = d1.calls_seen
    assert np.array_equal(mod_op.mod_exp(be, ctx, a, e), mod_op.mod_exp(CPU, ctx, a, e))
    assert d0.computed["mod_exp"] == 16 + n and d1.calls_seen == seen1
    assert [r["elements"] for r in rows_for(be, "mod_exp") if r["backend"] == "native"] == [16]
    # the last device dies too: the whole backend is retired and native takes every later batch
    FaultyNative.plan = FaultPlan(OSError("device 0 lost"), op="mod_exp", instance=0)
    assert np.array_equal(mod_op.mod_exp(be, ctx, a, e), mod_op.mod_exp(CPU, ctx, a, e))
    assert np.array_equal(mod_op.mod_exp(be, ctx, a, e), mod_op.mod_exp(CPU, ctx, a, e))
    assert d0.computed["mod_exp"] == 16 + n and be.live_members() == []
    assert [r["elements"] for r in rows_for(be, "mod_exp") if r["backend"] == "native"] == [16 + 2 * n]
    failed = {r["device"][:2]: r for r in rows_for(be, "mod_exp") if r.get("failed_calls")}
    assert failed["#1"]["failed_elements"] == 16 and failed["#0"]["failed_elements"] == n
    be.close()


def test_failed_piece_of_a_multi_exp_split_over_bases(faulty):
    # K < devices: the multi-exponentiation is split over its N bases and the partial products
    # multiplied; the failed partial is recomputed on the fallback, the other one kept
    be = chain(devices=[{"threads": 1}, {"threads": 1}], executor="serial")
    d0, d1 = FaultyNative.instances
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    n = 40
    bases = ctx.to_limbs([secrets.randbelow(m) for _ in range(n)])
    exps = np.stack([mod_op.exp_limbs([secrets.randbits(64) for _ in range(n)])])
    FaultyNative.plan = FaultPlan(RuntimeError("kernel timeout"), op="mont_multi_exp", instance=0)
    assert np.array_equal(mod_op.mont_multi_exp(be, ctx, bases, exps),
                          mod_op.mont_multi_exp(CPU, ctx, bases, exps))
    assert d0.computed["mont_multi_exp"] == 0 and d1.computed["mont_multi_exp"] == 20
    native = [r for r in rows_for(be, "mont_multi_exp") if r["backend"] == "native"]
    assert [r["elements"] for r in native] == [20]
    be.close()


def test_a_shared_exponent_row_is_split_and_falls_back(faulty):
    # mod_exp_secret by its row rule: a shared (1, Le) exponent goes whole to every piece, a
    # per-row one is cut; a failed piece falls back like any other
    be = chain(devices=[{"threads": 1}, {"threads": 1}], executor="serial")
    d0, d1 = FaultyNative.instances
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(24)])
    for e in (mod_op.exp_limbs(secrets.randbits(500)),                 # shared: (1, Le)
              mod_op.exp_limbs([secrets.randbits(300) for _ in range(24)])):
        assert np.array_equal(mod_op.mod_exp_secret(be, ctx, a, e), mod_op.mod_exp(CPU, ctx, a, e))
    FaultyNative.plan = FaultPlan(OSError("device 1 lost"), instance=1)
    assert np.array_equal(mod_op.mod_exp_secret(be, ctx, a, e), mod_op.mod_exp(CPU, ctx, a, e))
    ev, = be.fallback_events()
    assert ev["scope"] == "piece" and ev["elements"] == 12 and ev["to"] == "native"
    be.close()


# ------------------------------------------------------------------ caller errors propagate
@pytest.mark.parametrize("exc", [
    OperandError("operand >= modulus"),
    InvalidCiphertextError("ciphertext is not a unit mod n^2"),
    KeyMismatchError("operands from different keys"),
    EncodingOverflowError("value does not fit"),
    ValueError("bad shape"),
    TypeError("wrong dtype"),
    NotImplementedError("a bug, not a device"),
], ids=lambda e: type(e).__name__)
def test_caller_errors_are_not_retried(faulty, exc):
    be = chain()
    dev = FaultyNative.instances[0]
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(5)])
    FaultyNative.plan = FaultPlan(exc, op="mod_mul")
    with pytest.raises(type(exc)) as info:
        mod_op.mod_mul(be, ctx, a, a)
    assert info.value is exc                           # unchanged, not wrapped
    assert be.chain.links == [be] and be.fallback_events() == []
    assert not any(r.get("failed_calls") for r in be.report())
    # the backend is not retired: the next call runs on it
    assert np.array_equal(mod_op.mod_mul(be, ctx, a, a), mod_op.mod_mul(CPU, ctx, a, a))
    assert dev.computed["mod_mul"] == 5


def test_caller_error_in_a_split_batch_is_not_retried(faulty):
    be = chain(devices=[{"threads": 1}, {"threads": 1}], executor="threads")
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(20)])
    exc = OperandError("bad operand in piece 1")
    FaultyNative.plan = FaultPlan(exc, op="mod_mul", instance=1)
    with pytest.raises(OperandError) as info:
        mod_op.mod_mul(be, ctx, a, a)
    assert info.value is exc and be.live_members() == [0, 1] and be.fallback_events() == []
    be.close()


def test_device_failure_classification():
    import unifl.core.errors as errors
    # what our own backends raise
    assert is_device_failure(errors.DeviceError("launch failed"))
    assert is_device_failure(BackendUnavailable("gone"))
    # driver exception roots that escape a third-party backend untranslated
    assert is_device_failure(RuntimeError("CUDA error 700"))
    assert is_device_failure(OSError("ioctl failed")) and is_device_failure(TimeoutError())
    assert is_device_failure(MemoryError())
    # a device fault, but its data is gone: no re-run can mend it, so it reaches the caller
    assert isinstance(DeviceDataLost("x"), errors.DeviceError)
    assert not is_device_failure(DeviceDataLost("x"))
    for exc in (OperandError(""), InvalidCiphertextError(""), KeyMismatchError(""),
                EncodingOverflowError(""), ValueError(), TypeError(), KeyError(), ZeroDivisionError(),
                AssertionError(), NotImplementedError(), RecursionError(),
                errors.TransportError("peer"), errors.PeerTimeout("peer")):
        assert not is_device_failure(exc), exc

    class CardError(Exception):
        pass

    class WithDeclared:
        device_errors = (CardError,)
    assert is_device_failure(CardError(), WithDeclared()) and not is_device_failure(CardError())


def test_no_backend_left_is_a_named_error(faulty):
    be = chain(fallback=("faulty2",))
    FaultyNative.plan = FaultPlan(RuntimeError("first dies"), op="mod_mul")
    FaultyNative2.plan = FaultPlan(RuntimeError("second dies"), op="mod_mul")
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(3)])
    with pytest.raises(BackendUnavailable, match="faulty2.*second dies.*no backend of the fallback"):
        mod_op.mod_mul(be, ctx, a, a)


# ------------------------------------------------------------------ device-resident inputs
def test_device_resident_inputs_of_the_failed_backend_are_read_back(faulty):
    be = chain(primary="faulty_resident")
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(9)])
    b = ctx.to_limbs([secrets.randbelow(m) for _ in range(9)])
    am = base_op.to_mont(be, ctx, a)                   # stays on the 'device'
    assert isinstance(am, StoredBatch) and not am.fetched
    FaultyResident.plan = FaultPlan(RuntimeError("launch failed"), op="mont_mul")
    got = base_op.mont_mul(be, ctx, am, b, checked=False)   # fails on faulty, re-run on native
    assert np.array_equal(np.asarray(got), base_op.mont_mul(CPU, ctx, base_op.to_mont(CPU, ctx, a), b))
    assert am.fetched and be.fallback_events()[0]["to"] == "native"


def test_device_resident_inputs_lost_with_the_device_are_a_named_error(faulty):
    be = chain(primary="faulty_resident")
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(4)])
    am = base_op.to_mont(be, ctx, a)
    FaultyResident.plan = FaultPlan(RuntimeError("context lost"), op="mont_mul")
    StoredBatch.lost = True                            # the device memory went with the device
    with pytest.raises(DeviceDataLost, match="faulty_resident.*checkpoint"):
        base_op.mont_mul(be, ctx, am, a, checked=False)


# ------------------------------------------------------------------ a federated run
def vlr_job(**params):
    base = {"epochs": 3, "batch_size": 64, "learning_rate": 0.15, "tol": None, "max_rows": 160}
    base.update(params)
    return {"job_id": "faults", "algorithm": "vlr", "dataset": "breast", "parties": ["guest", "host"],
            "seed": 11, "key_bits": 1024, "params": base}


def test_vertical_lr_guest_backend_dies_mid_epoch_2_same_model(faulty, monkeypatch):
    # FaultyNative.calls when the guest saves its state after epoch k: the epoch boundaries in op
    # calls, so the fault can be put in the middle of epoch 2 and checked to have fired there
    boundaries: dict[int, int] = {}
    real_save = checkpoint.save

    def save(*args, **kw):
        if threading.current_thread().name == "unifl-guest":
            epoch = kw["epoch"] if "epoch" in kw else args[2]
            boundaries[int(epoch)] = FaultyNative.calls
        return real_save(*args, **kw)
    monkeypatch.setattr(checkpoint, "save", save)

    host = registry.backend("native")
    clean_be = chain()
    clean = run_local(vlr_job(), None, backends={"guest": clean_be, "host": host})
    assert clean_be.fallback_events() == [] and {1, 2, 3} <= set(boundaries)
    b1, b2 = boundaries[1], boundaries[2]
    assert b2 - b1 >= 4                                  # epoch 2 has calls to fail in

    boundaries.clear()
    FaultyNative.calls = 0
    be = chain()
    FaultyNative.plan = plan = FaultPlan(RuntimeError("CUDA error 999: unspecified launch failure"),
                                         at=(b1 + b2) // 2)
    res = run_local(vlr_job(), None, backends={"guest": be, "host": host})
    assert b1 < plan.fired_at_call <= boundaries[2]     # it died in the middle of epoch 2
    for role in ("guest", "host"):
        assert np.array_equal(res[role]["model"]["weights"], clean[role]["model"]["weights"])
    assert res["guest"]["metrics"]["auc"] == clean["guest"]["metrics"]["auc"]
    ev, = be.fallback_events()
    assert (ev["from"], ev["to"], ev["scope"]) == ("faulty", "native", "batch")
    assert "unspecified launch failure" in ev["reason"]
    rows = be.report()
    assert any(r["backend"] == "faulty" and r.get("failed_calls") == 1 and
               r["fell_back_to"].startswith("native") for r in rows)
    assert any(r["backend"] == "native" and r.get("fallback_from", "").startswith("faulty")
               for r in rows)
    assert FaultyNative.calls == plan.fired_at_call     # nothing reached it after the fault
