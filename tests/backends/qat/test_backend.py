"""The qat backend: probe and labels, configuration errors, refusal without a library, the
CpaInstanceInfo2 layout detection, operand size classes and the oversize CPU path.

Bit-identity with ``cpu`` is checked by the shared harness (tests/backends/test_equivalence.py -k qat).
These run on our QAT simulator library unless a real libqat is installed.
"""

from __future__ import annotations

import secrets

import pytest

from unifl.mod_op import ints
import unifl
from unifl.core import registry
from unifl.core.errors import BackendUnavailable, ConfigError

pytestmark = pytest.mark.skipif(not registry.probe("qat").available,
                                reason=f"qat unavailable: {registry.probe('qat').reason}")

from unifl.backends.qat import runtime  # noqa: E402  (after the skip marker on purpose)


@pytest.fixture
def fresh(monkeypatch):
    """Close the process's QAT session before and after, so simulator env changes take effect."""
    runtime.close()
    yield monkeypatch
    runtime.close()


def test_probe_and_reports_name_the_simulator():
    pr = registry.probe("qat")
    be = unifl.backend("qat")
    if be.simulator:
        assert pr.stand_in == "QAT simulator"
        assert "QAT simulator" in be.describe() and "QAT simulator" in repr(be)
        assert all("QAT simulator" in d for d in be.devices)
        assert be.stats()["stand_in"] == "QAT simulator"
        info = be.session().info()
        assert info["simulator"] and info["instances"]
        assert all(i["offloaded"] is False for i in info["instances"])   # software-only, says Info2


@pytest.mark.parametrize("max_cores", ["4096", "256"])
def test_instance_info2_layouts_recognised(fresh, max_cores):
    """Both documented CpaInstanceInfo2 tails (CPA_MAX_CORES 4096 and 256) are recognised."""
    if runtime.find_real_library():
        pytest.skip("a real libqat is installed")
    fresh.setenv("UNIFL_QAT_SIM_MAX_CORES", max_cores)
    fresh.setenv("UNIFL_QAT_SIM_INSTANCES", "3")
    be = unifl.backend("qat", library="simulator")
    insts = be.session().info()["instances"]
    assert len(insts) == 3
    assert {i["info2_layout"] for i in insts} == {f"CPA_MAX_CORES={max_cores}"}
    assert all(i["polled"] and i["contiguous_memory"] for i in insts)
    assert [i["name"] for i in insts] == ["SSL_sim0", "SSL_sim1", "SSL_sim2"]


def test_library_not_found_is_refused_clearly(fresh):
    with pytest.raises(BackendUnavailable, match="not found"):
        unifl.backend("qat", library="/nonexistent/libqat.so")
    if runtime.find_real_library() is None:
        with pytest.raises(BackendUnavailable, match=r"libqat\.so not found.*simulator is disabled"):
            unifl.backend("qat", simulator=False)
        fresh.setenv("UNIFL_QAT_SIMULATOR", "0")
        assert not registry.backend_class("qat").probe().available
        assert "libqat.so not found" in registry.backend_class("qat").probe().reason


def test_a_library_without_the_qat_api_is_refused(fresh, tmp_path):
    import ctypes.util
    libm = ctypes.util.find_library("m") or "libm.so.6"
    with pytest.raises(BackendUnavailable, match="lacks icp_sal_userStart"):
        unifl.backend("qat", library=libm)


@pytest.mark.parametrize("opts, field", [({"cpu_share": 1.5}, "cpu_share"),
                                         ({"cpu_share": "x"}, "cpu_share"),
                                         ({"max_in_flight": 0}, "max_in_flight"),
                                         ({"instances": -2}, "instances"),
                                         ({"instances": "some"}, "instances")])
def test_bad_options_name_the_field(opts, field):
    with pytest.raises(ConfigError, match=field):
        unifl.backend("qat", **opts)


def test_size_classes():
    from unifl.backends.qat import _qat
    assert [_qat.class_bits(b) for b in (1, 64, 512, 513, 1024, 2048, 2049, 4096, 4097, 6144, 8192)] \
        == [512, 512, 512, 1024, 1024, 2048, 2560, 4096, 8192, 8192, 8192]
    assert _qat.class_bits(8193) == 0


def test_oversize_and_trivial_operands_take_the_cpu_path():
    """An exponent over 8192 bits cannot go to QAT: recomputed on the CPU, still exact; a zero
    exponent is answered on the host."""
    be = unifl.backend("qat", library="simulator")
    m = secrets.randbits(1024) | (1 << 1023) | 1
    base = [secrets.randbelow(m) for _ in range(6)]
    exps = [secrets.randbits(9000), 0, 5, secrets.randbits(8192), 1, secrets.randbits(8300)]
    before = be.stats()
    assert ints.mod_exp(be, base, exps, m) == [pow(b, e, m) for b, e in zip(base, exps)]
    after = be.stats()
    assert after["oversize"] - before["oversize"] == 2
    assert after["host_trivial"] - before["host_trivial"] == 1
    assert after["submitted"] - before["submitted"] == 3
