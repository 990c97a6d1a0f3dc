"""The scheduler's wrappers against the op contract: every op of ``unifl.core.contract.OPS`` is
wrapped by CountingBackend and MultiDeviceBackend with the contract's signature, has a splitting
rule, and splits bit-identically to one device running the whole batch; a device failure of one
member mid-batch is handed to the fallback chain, a caller's error is not; the fallback re-runs
any op from its own arguments (contexts, batches, key records -- never key objects).

Inputs are generated per op by ``GENERATORS``; an op added to the contract without a generator
fails :func:`test_every_op_has_inputs` by name.
"""

from __future__ import annotations

import inspect

import pytest

import unifl
from unifl.backends.cpu import CpuBackend
from unifl.core import registry
from unifl.core.backend import Backend
from unifl.core.contract import OPS, SIGNATURES
from unifl.core.errors import (BackendUnavailable, DeviceDataLost, DeviceError,
                               InvalidCiphertextError, OperandError)
from unifl.scheduler import CountingBackend, MultiDeviceBackend, SerialExecutor, ThreadExecutor
from unifl.scheduler import fallback, multi
from unifl.scheduler.fallback import FallbackChain, batch_elements, is_device_failure, run_op

from tests.helpers.op_inputs import (CPU, GENERATORS, HAVE_NATIVE, N, _exp_args,
                                     _mont_mul_args, _natives, _same)

# ------------------------------------------------------------------ the wrappers cover OPS
def test_every_op_has_inputs():
    missing = [op for op in OPS if op not in GENERATORS]
    assert not missing, f"add input generators for the new op(s) {missing} to GENERATORS"


@pytest.mark.parametrize("op", OPS)
def test_every_op_is_wrapped_with_the_contract_signature(op):
    for cls in (CountingBackend, MultiDeviceBackend):
        method = getattr(cls, f"op_{op}", None)
        assert callable(method), f"{cls.__name__} has no op_{op}"
        assert inspect.signature(method) == SIGNATURES[op], (cls.__name__, op)
    assert op in multi.SPLITS


def test_splitting_rules_match_the_contract_exactly():
    assert set(multi.SPLITS) == set(OPS)


def test_an_op_without_a_splitting_rule_is_a_named_failure(monkeypatch):
    rules = dict(multi.SPLITS)
    rules.pop("paillier_decrypt")
    monkeypatch.setattr(multi, "SPLITS", rules)
    with pytest.raises(TypeError, match=r"no splitting rule for op\(s\) op_paillier_decrypt"):
        multi._check_splits()


def test_a_rule_naming_a_wrong_parameter_is_a_named_failure(monkeypatch):
    monkeypatch.setitem(multi.SPLITS, "mod_exp", multi.Rows(("base",), exps="exponents"))
    multi._positions.cache_clear()
    with pytest.raises(TypeError, match=r"op_mod_exp names \['exponents'\]"):
        multi._check_splits()
    multi._positions.cache_clear()


# ------------------------------------------------------------------ splits are bit-identical
def _multi_over(members: list[Backend], executor=None) -> MultiDeviceBackend:
    # three members with uneven weights and min_rows=1: every member gets a piece of N rows
    wrapped = [CountingBackend(m, device=f"d{i}") for i, m in enumerate(members)]
    return MultiDeviceBackend(wrapped, executor or SerialExecutor(), weights=[1, 2, 1][:len(wrapped)],
                              min_rows=1)


@pytest.mark.parametrize("executor", ["serial", "threads"])
@pytest.mark.parametrize("op", OPS)
def test_every_op_splits_bit_identically(op, executor):
    impl = _natives(op)
    if not impl:
        pytest.skip(f"no cpu/native member implements {op} natively here (the wrappers have "
                    "op_" + op + ", checked above)")
    members = [impl[i % len(impl)] for i in range(3)]        # cpu and native mixed when both can
    be = _multi_over(members, ThreadExecutor(3) if executor == "threads" else None)
    counting = CountingBackend(impl[-1])
    assert be.implements(op) and counting.implements(op)
    for args in GENERATORS[op]():
        want = getattr(impl[0], f"op_{op}")(*args)
        assert _same(getattr(be, f"op_{op}")(*args), want), op
        assert _same(getattr(counting, f"op_{op}")(*args), want), op
    rows = [r for r in be.report() if r["op"] == op]
    assert len(rows) >= 2, f"{op} was not split: {rows}"   # more than one device took a piece
    be.close()


def test_the_report_adds_up_to_the_batch():
    be = _multi_over([CPU, CPU, CPU])
    args, = _mont_mul_args()
    be.op_mont_mul(*args)
    rows = [r for r in be.report() if r["op"] == "mont_mul"]
    assert sorted(r["elements"] for r in rows) == [6, 6, 11]    # weights 1:2:1 of 23 rows
    assert sum(r["elements"] for r in rows) == batch_elements("mont_mul", args) == N


def test_rows_of_different_lengths_are_refused_by_name():
    be = _multi_over([CPU, CPU])
    ctx, a, b = _mont_mul_args()[0]
    with pytest.raises(OperandError, match=r"op_mont_mul: b has 22 rows, a has 23"):
        be.op_mont_mul(ctx, a, b[:-1])


# ------------------------------------------------------------------ device failures mid-batch
class _Flaky(Backend):
    """``inner`` whose op ``op`` fails with ``exc`` on its ``at``-th call (test-only)."""

    name = "flaky"

    def __init__(self, inner: Backend, op: str, exc: BaseException, at: int = 1) -> None:
        super().__init__()
        self.inner, self.fail_op, self.exc, self.at = inner, op, exc, at
        self.native_ops = frozenset(o for o in OPS if inner.implements(o))
        self.calls = 0

    def __getattr__(self, item: str):
        if not item.startswith("op_"):
            raise AttributeError(item)
        target = getattr(self.inner, item)

        def op(*args):
            if item == f"op_{self.fail_op}":
                self.calls += 1
                if self.calls == self.at:
                    raise self.exc
            return target(*args)
        return op


def _chain(members: list[Backend], fallback_names=("cpu",)) -> MultiDeviceBackend:
    be = _multi_over(members)
    FallbackChain(be, list(fallback_names),
                  lambda name: CountingBackend(registry.backend(name), device=name))
    return be


FAILING_OPS = ["mod_exp", "mont_multi_exp", "mont_prod_groups", "paillier_encrypt",
               "paillier_decrypt"]


@pytest.mark.parametrize("op", FAILING_OPS)
def test_a_device_error_mid_batch_is_handed_to_the_fallback(op):
    impl = _natives(op)
    if not impl:
        pytest.skip(f"no cpu/native backend implements {op} natively here")
    inner = impl[-1]
    exc = DeviceError(f"card 1: {op} launch failed (test)")
    flaky = _Flaky(inner, op, exc)
    be = _chain([inner, flaky, inner], fallback_names=("native", "cpu") if HAVE_NATIVE else ("cpu",))
    for args in GENERATORS[op]()[:1]:
        want = getattr(inner, f"op_{op}")(*args)
        assert _same(getattr(be, f"op_{op}")(*args), want)
    ev, = be.fallback_events()
    assert ev["op"] == op and ev["scope"] == "piece" and ev["from_device"] == "d1"
    assert ev["reason"] == f"DeviceError: {exc}"
    assert be.live_members() == [0, 2]                   # the failed device is retired
    args = GENERATORS[op]()[0]                           # the next batch avoids it
    assert _same(getattr(be, f"op_{op}")(*args), getattr(inner, f"op_{op}")(*args))
    assert flaky.calls == 1 and len(be.fallback_events()) == 1
    be.close()


def test_a_device_error_is_handed_to_the_fallback_by_a_single_device():
    ctx, a, e = _exp_args()[0]
    flaky = _Flaky(CPU, "mod_exp", DeviceError("QAT instance 0: request failed (test)"))
    be = CountingBackend(flaky, device="d0")
    FallbackChain(be, ["cpu"], lambda name: CountingBackend(registry.backend(name), device=name))
    assert _same(be.op_mod_exp(ctx, a, e), CPU.op_mod_exp(ctx, a, e))
    ev, = be.fallback_events()
    assert (ev["scope"], ev["to"], ev["elements"]) == ("batch", "cpu", N)
    assert be.chain.retired(0) and be.implements("mod_exp")


@pytest.mark.parametrize("exc", [OperandError("row 4 >= modulus (test)"),
                                 InvalidCiphertextError("not a unit (test)"),
                                 ValueError("bad shape (test)")],
                         ids=lambda e: type(e).__name__)
def test_a_caller_error_is_not_swallowed_by_the_fallback(exc):
    ctx, a, e = _exp_args()[0]
    flaky = _Flaky(CPU, "mod_exp", exc)
    be = _chain([CPU, flaky, CPU])
    with pytest.raises(type(exc)) as info:
        be.op_mod_exp(ctx, a, e)
    assert info.value is exc                             # unchanged, not wrapped
    assert be.fallback_events() == [] and be.chain.links == [be]
    assert be.live_members() == [0, 1, 2]                # nothing retired
    assert _same(be.op_mod_exp(ctx, a, e), CPU.op_mod_exp(ctx, a, e))
    be.close()


def test_device_failure_types():
    assert is_device_failure(DeviceError("x")) and DeviceError in fallback.DEVICE_FAILURES
    assert fallback.DEVICE_FAILURES[0] is DeviceError
    assert is_device_failure(BackendUnavailable("x")) and is_device_failure(RuntimeError("x"))
    # lost device data is a device fault no re-run can mend: raised, never re-run
    assert issubclass(DeviceDataLost, DeviceError) and not is_device_failure(DeviceDataLost("x"))
    for exc in (OperandError("x"), InvalidCiphertextError("x"), ValueError(), TypeError()):
        assert not is_device_failure(exc)


# ------------------------------------------------------------------ re-running any op
class _MontMulOnly(CpuBackend):
    """cpu with nothing native but the base op: every other op is re-run by its composition."""

    name = "mm_only"
    native_ops = frozenset({"mont_mul"})


@pytest.mark.parametrize("op", OPS)
def test_the_fallback_reruns_every_op_from_its_arguments(op):
    """``run_op`` with nothing but the op's arguments (contexts, batches, key records): natively
    where the target has the op, else by its generic composition -- bit-identical either way."""
    try:
        fallback.composition(op)
    except BackendUnavailable as exc:
        pytest.skip(f"{exc} (the layer owning {op} must expose it on key records)")
    impl = _natives(op)
    target = _MontMulOnly()
    assert not target.implements(op) or op == "mont_mul"
    for args in GENERATORS[op]():
        assert not any(isinstance(x, (unifl.PublicKey, unifl.PrivateKey)) for x in args)
        got = run_op(target, op, args)
        if impl:
            assert _same(got, getattr(impl[0], f"op_{op}")(*args)), op
        else:                                            # no native reference: cpu's composition
            assert _same(got, run_op(CPU, op, args)), op


def test_composition_of_an_unknown_op_is_a_named_error():
    with pytest.raises(BackendUnavailable, match="'mont_frobnicate' is not an op of the contract"):
        fallback.composition("mont_frobnicate")
