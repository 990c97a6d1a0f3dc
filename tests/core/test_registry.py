"""The backend registry's capability model, exponent layout and the README example."""

from __future__ import annotations

import numpy as np
import pytest

from unifl.mod_op import ints
import unifl
from unifl import mod_op
from unifl.core import registry
from unifl.core.backend import Backend, ProbeResult

from tests.helpers.keys import paillier_keypair


def test_registry_lists_and_probes():
    assert {"cpu", "native"} <= set(registry.names())
    assert "cpu" in unifl.available_backends()
    pr = registry.probe("cpu")
    assert pr.available and pr.devices


class _MontOnly(Backend):
    name = "montonly-test"
    native_ops = frozenset({"mont_mul"})
    calls = 0

    def op_mont_mul(self, ctx, a, b):
        type(self).calls += 1
        return unifl.backend("cpu").op_mont_mul(ctx, a, b)


class _Unavailable(Backend):
    name = "absent-test"
    native_ops = frozenset({"mont_mul"})

    @classmethod
    def probe(cls):
        return ProbeResult(False, "no such device: test double")

    def op_mont_mul(self, ctx, a, b):  # pragma: no cover
        raise AssertionError


def test_generic_composition_runs_on_the_backend_itself():
    registry.register("montonly-test", _MontOnly)
    be = unifl.backend("montonly-test")
    assert not be.implements("mod_exp") and be.implements("mont_mul")
    m = 2 ** 255 - 19
    before = _MontOnly.calls
    assert ints.mod_exp(be, [3, 5], [100, 0], m) == [pow(3, 100, m), 1]
    assert ints.mod_mul(be, [3], [5], m) == [15]
    assert _MontOnly.calls > before           # composed from this backend's MontMults


def test_unavailable_backend_reason_and_bad_registration():
    registry.register("absent-test", _Unavailable)
    with pytest.raises(unifl.BackendUnavailable, match="no such device: test double"):
        unifl.backend("absent-test")
    assert "absent-test" not in unifl.available_backends()

    class Bad(Backend):
        name = "bad"
        native_ops = frozenset({"mont_mul", "mod_exp"})

        def op_mont_mul(self, ctx, a, b):  # pragma: no cover
            return a
    with pytest.raises(TypeError, match="no op_<name> method"):
        registry.register("bad", Bad)

    class NoBase(Backend):
        name = "nobase"
        native_ops = frozenset({"mod_exp"})

        def op_mod_exp(self, ctx, a, e):  # pragma: no cover
            return a
    with pytest.raises(TypeError, match="mont_mul natively"):
        registry.register("nobase", NoBase)


def test_exponent_limbs_and_windows():
    e = mod_op.exp_limbs([0, 1, 2 ** 64, 2 ** 130 + 5])
    assert e.shape == (4, 3) and e.dtype == np.uint64
    with pytest.raises(unifl.OperandError):
        mod_op.exp_limbs([-1])


def test_readme_example():
    pk, sk = paillier_keypair(1024)
    x = unifl.EncryptedArray.encrypt(pk, np.array([1.5, -2.0, 3.25]), backend="native")
    y = (x + x) * np.array([2, -1, 4]) + 1.0
    assert np.allclose(y.decrypt(sk), [7.0, 5.0, 27.0])
    be = unifl.backend("native")
    m = 2 ** 127 - 1
    R = 2 ** 128
    assert ints.mont_mul(be, [3, 5], [7, 11], m) == [21 * pow(R, -1, m) % m, 55 * pow(R, -1, m) % m]
    assert ints.mod_exp(be, [3], 65537, m) == [pow(3, 65537, m)]
    assert sk.raw_decrypt(pk.raw_encrypt([42])) == [42]
    assert np.allclose(unifl.phe_sdk.ops.add(x, x).decrypt(sk), [3.0, -4.0, 6.5])
