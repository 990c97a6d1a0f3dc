"""The qat backend against the deployments it meets: library sonames of every qatlib release and the
QAT 1.x package (USDM loaded globally first), symmetric-only instances, libraries that refuse a size
class, the simulator kept out of the global symbol scope and never mixed with a real library in one
process, and the pinned pool freed before the user-space process stops.

Each case is played on our simulator library: configured by ``UNIFL_QAT_SIM_*``, reached through a
versioned soname, or copied under another name with its identity symbol renamed (a foreign library
with the same C ABI: what the driver takes for a real one).
"""

from __future__ import annotations

import ctypes
import os
import secrets
import subprocess
import sys
import textwrap
import warnings

import pytest

import unifl
from unifl.core import registry
from unifl.core.errors import BackendUnavailable
from unifl.mod_op import ints

pytestmark = pytest.mark.skipif(not registry.probe("qat").available,
                                reason=f"qat unavailable: {registry.probe('qat').reason}")

from unifl.backends.qat import runtime  # noqa: E402

from tests.helpers.qat_sim import simulator_backends  # noqa: E402
from tests.helpers.paths import ROOT as REPO_ROOT  # noqa: E402

ROOT = str(REPO_ROOT)


@pytest.fixture
def sim(monkeypatch):
    """A factory of qat backends on a fresh simulator session configured by UNIFL_QAT_SIM_* env."""
    if runtime.find_real_library():
        pytest.skip("a real libqat is installed: these cases play the simulator")
    yield from simulator_backends(monkeypatch)


def _batch(bits: int, n: int):
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    base = [secrets.randbelow(m) for _ in range(n)]
    exps = [secrets.randbits(bits) | 1 for _ in range(n)]
    return m, base, exps, [pow(b, e, m) for b, e in zip(base, exps)]


def _sim_lib() -> ctypes.CDLL:
    """The simulator library as loaded in this process (the same handle the driver uses)."""
    path = runtime.simulator_path()
    assert path
    return ctypes.CDLL(path)


def _sim_counters() -> list[int]:
    out = (ctypes.c_uint64 * 8)()
    _sim_lib().unifl_qat_sim_stats(out)
    return list(out)


def _foreign_copy(tmp_path, name: str = "libqat.so.4") -> str:
    """A copy of the simulator whose identity symbol is renamed: a library with the QAT C ABI that
    the driver cannot tell from a real one (same-length rename in the dynamic string table)."""
    path = runtime.simulator_path()
    assert path
    data = open(path, "rb").read()
    assert b"unifl_qat_sim_identity" in data
    out = tmp_path / name
    out.write_bytes(data.replace(b"unifl_qat_sim_identity", b"unifl_qat_sim_identitX"))
    lib = ctypes.CDLL(str(out))
    assert not hasattr(lib, "unifl_qat_sim_identity") and hasattr(lib, "icp_sal_userStart")
    return str(out)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (a process of its own, as the one-kind rule needs)."""
    full_env = dict(os.environ, PYTHONPATH=ROOT, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------ library names
class _FakeDlopen:
    """dlopen stand-in: ``present`` load; ``libqat_s.so`` needs a USDM in the global scope first
    (its qaeMem* are undefined in it, as in the QAT 1.x package)."""

    def __init__(self, *present: str) -> None:
        self.present = set(present)
        self.calls: list[tuple[str, int]] = []
        self.global_scope: set[str] = set()

    def __call__(self, name: str, mode: int) -> object:
        self.calls.append((os.path.basename(name), mode))
        base = os.path.basename(name)
        if base not in self.present:
            raise OSError(f"{name}: cannot open shared object file")
        if base.startswith("libqat_s.") and not self.global_scope & set(runtime.QAT1X_USDM_NAMES):
            raise OSError(f"{name}: undefined symbol: qaeMemAllocNUMA")
        if mode == ctypes.RTLD_GLOBAL:
            self.global_scope.add(base)
        return object()


@pytest.mark.parametrize("soname, release", [("libqat.so.4", "23.08 .. 26.08"),
                                             ("libqat.so.3", "22.07 .. 23.02"),
                                             ("libqat.so.2", "21.08 / 21.11"),
                                             ("libqat.so.0", "20.08 .. 21.05")])
def test_every_qatlib_soname_is_found_without_the_dev_symlink(soname, release):
    """qatlib installs libqat.so.N (libqat.so only with its -devel symlink); every N it has used
    is searched, and the library comes with qatlib's USDM."""
    fake = _FakeDlopen(soname, "libusdm.so.0")
    found = runtime.search_real_library(load=fake)
    assert found == (soname, runtime.QATLIB_USDM_NAMES), release
    assert ("libusdm.so.0", ctypes.RTLD_GLOBAL) in fake.calls
    assert (soname, ctypes.RTLD_LOCAL) in fake.calls


def test_newest_qatlib_soname_wins():
    fake = _FakeDlopen("libqat.so.0", "libqat.so.3", "libqat.so.4", "libqat.so", "libqat_s.so")
    assert runtime.search_real_library(load=fake)[0] == "libqat.so.4"
    order = runtime.REAL_QAT_NAMES
    assert order.index("libqat.so.4") < order.index("libqat.so.3") < order.index("libqat.so.2") \
        < order.index("libqat.so.0") < order.index("libqat.so") < order.index("libqat_s.so")


def test_usdm_is_loaded_globally_before_libqat_s_is_probed():
    """QAT 1.x: libqat_s.so loads only with libusdm_drv_s.so already in the global scope."""
    fake = _FakeDlopen("libqat_s.so", "libusdm_drv_s.so")
    assert runtime.search_real_library(load=fake) == ("libqat_s.so", ("libusdm_drv_s.so",))
    names = [n for n, _ in fake.calls]
    assert fake.calls[names.index("libusdm_drv_s.so")][1] == ctypes.RTLD_GLOBAL
    assert names.index("libusdm_drv_s.so") < names.index("libqat_s.so")
    assert runtime.usdm_names_for("/opt/qat/build/libqat_s.so") == ("libusdm_drv_s.so",)
    assert runtime.usdm_names_for("libqat.so.3") == ("libusdm.so.0", "libusdm.so")


def test_a_versioned_soname_in_a_folder_is_found_and_started(sim, tmp_path):
    """A folder holding only ``libqat.so.3`` (qatlib 22.07's soname, no dev symlink): the search
    finds it and the driver starts a session through it (here it is our simulator)."""
    sim()
    link = tmp_path / "libqat.so.3"
    link.symlink_to(runtime.simulator_path())
    found = runtime.search_real_library(dirs=[str(tmp_path)])
    assert found == (str(link), runtime.QATLIB_USDM_NAMES)
    runtime.close()
    be = unifl.backend("qat", library=str(link))
    assert be.session().info()["library"] == str(link)
    m, base, exps, ref = _batch(1024, 6)
    assert ints.mod_exp(be, base, exps, m) == ref


# ------------------------------------------------------------------ instances
def test_symmetric_only_instances_are_left_out(sim):
    """cpaCyGetNumInstances counts symmetric-only instances, on which every cpaCyLnModExp fails:
    they are found, stopped and left out; the work runs on the one asymmetric instance."""
    be = sim({"UNIFL_QAT_SIM_INSTANCES": 3, "UNIFL_QAT_SIM_SYM_ONLY": 2})
    info = be.session().info()
    assert info["instances_found"] == 3
    assert [i["name"] for i in info["instances"]] == ["SSL_sim2"]
    assert [k["name"] for k in info["skipped_instances"]] == ["SSL_sim0", "SSL_sim1"]
    assert all("lnSupported" in k["reason"] for k in info["skipped_instances"])
    assert len(be.devices) == 1
    m, base, exps, ref = _batch(1024, 12)
    assert ints.mod_exp(be, base, exps, m) == ref
    s = be.stats()
    assert s["submitted"] == s["completed"] == 12
    assert s["submit_failures"] == 0 and s["device_failures"] == 0


def test_only_symmetric_instances_is_refused(sim):
    with pytest.raises(BackendUnavailable, match=r"large-number API.*SSL_sim0.*lnSupported"):
        sim({"UNIFL_QAT_SIM_INSTANCES": 2, "UNIFL_QAT_SIM_SYM_ONLY": 2})


# ------------------------------------------------------------------ size classes
def test_a_refused_size_class_goes_to_the_cpu_after_its_first_failure(sim):
    """A library without the 8192-bit class (UNIFL_QAT_SIM_MAX_BITS=4096) refuses it with
    CPA_STATUS_FAIL: the first refusal sends the class to the CPU for the rest of the session (one
    warning), other classes stay on the card, every result is exact."""
    be = sim({"UNIFL_QAT_SIM_MAX_BITS": 4096})
    m, base, exps, ref = _batch(6144, 10)                       # n^2 of a 3072-bit key: 8192 class
    with pytest.warns(runtime.QatSizeClassWarning, match="8192-bit size class"):
        assert ints.mod_exp(be, base, exps, m) == ref
    s = be.stats()
    assert s["submit_failures"] == 1                            # the one refusal ...
    assert s["class_fallbacks"] == 9                            # ... the rest straight to the CPU
    assert s["cpu_size_classes"] == [8192] and s["size_classes_on_cpu"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", runtime.QatSizeClassWarning)     # warned once only
        assert ints.mod_exp(be, base, exps, m) == ref
        m2, base2, exps2, ref2 = _batch(2048, 8)
        assert ints.mod_exp(be, base2, exps2, m2) == ref2
    s2 = be.stats()
    assert s2["submit_failures"] == 1 and s2["class_fallbacks"] == 19
    assert s2["submitted"] - s["submitted"] == 8 and s2["completed"] == 8  # 2048 bits on the card
    runtime.close()
    fresh = sim({"UNIFL_QAT_SIM_MAX_BITS": 8192})                # a new session starts clean
    assert fresh.stats()["cpu_size_classes"] == []


def test_a_class_that_completed_on_the_card_is_not_switched_off(sim):
    """A failure of a class that has worked is a fault, not a missing class: those requests are
    recomputed one by one, and the class stays on the card."""
    be = sim()
    m, base, exps, ref = _batch(2048, 4)
    assert ints.mod_exp(be, base, exps, m) == ref
    lib = _sim_lib()
    lib.unifl_qat_sim_set_max_bits.argtypes = [ctypes.c_uint]
    lib.unifl_qat_sim_set_max_bits(1024)
    try:
        assert ints.mod_exp(be, base, exps, m) == ref
    finally:
        lib.unifl_qat_sim_set_max_bits(8192)
    s = be.stats()
    assert s["submit_failures"] == 4 and s["class_fallbacks"] == 0
    assert s["cpu_size_classes"] == []


# ------------------------------------------------------------------ shutdown order
def test_pinned_pool_is_freed_before_the_user_process_stops(sim):
    """The simulator refuses (and counts) qaeMemFreeNUMA after icp_sal_userStop: a session's
    close() frees its whole pinned pool before stopping."""
    live_before = _sim_counters()[7]
    be = sim(max_in_flight=16)
    m, base, exps, ref = _batch(1024, 40)
    assert ints.mod_exp(be, base, exps, m) == ref
    assert be.stats()["pool_slots"] == 16
    assert _sim_counters()[7] == live_before + 16
    be.close()
    frees_after_stop, live = _sim_counters()[6:8]
    assert frees_after_stop == 0
    assert live == live_before


# ------------------------------------------------------------------ one kind of library a process
def test_simulator_symbols_stay_out_of_the_global_scope():
    """With a simulator session running, no qaeMem*/icp_sal_* of it is in the process's global
    scope, where a real library loaded later would bind to it."""
    r = _run("""
        import ctypes, unifl
        from unifl.backends.qat import runtime
        be = unifl.backend("qat", library="simulator")
        assert be.simulator and be.session().info()["instances"]
        glob = ctypes.CDLL(None)
        print(sorted(n for n in ("qaeMemAllocNUMA", "qaeMemFreeNUMA", "qaeVirtToPhysNUMA",
                                 "icp_sal_userStart", "cpaCyLnModExp") if hasattr(glob, n)))
        runtime.close()
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_a_real_library_after_the_simulator_is_refused(sim, tmp_path):
    be = sim()
    m, base, exps, ref = _batch(512, 3)
    assert ints.mod_exp(be, base, exps, m) == ref                # the simulator ran here
    foreign = _foreign_copy(tmp_path)
    runtime.close()
    with pytest.raises(BackendUnavailable,
                       match=r"already loaded the QAT simulator.*libqat\.so\.4.*new process"):
        unifl.backend("qat", library=foreign)
    assert ints.mod_exp(sim(), base, exps, m) == ref            # the simulator still serves


def test_the_simulator_after_a_real_library_is_refused(tmp_path):
    foreign = _foreign_copy(tmp_path)
    r = _run(f"""
        import unifl
        from unifl.backends.qat import runtime
        from unifl.core.errors import BackendUnavailable
        from unifl.mod_op import ints
        be = unifl.backend("qat", library={foreign!r})
        assert not be.simulator and be.describe() == "qat"
        m = 1000003
        assert ints.mod_exp(be, [3, 5], [7, 11], m) == [pow(3, 7, m), pow(5, 11, m)]
        runtime.close()
        try:
            unifl.backend("qat", library="simulator")
        except BackendUnavailable as exc:
            print("REFUSED", exc)
        else:
            print("STARTED")
    """)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("REFUSED") and "already loaded the real QAT library" in last
    assert "new process" in last
