"""The fpga stand-in on a CPU that PoCL's LLVM does not know (AMD Zen 5 reports family 26; pip's PoCL
3.0 is built on LLVM 14.0.6, which names such a CPU 'generic' and then refuses it as a target CPU).

The CPU is simulated, not mocked: each check runs a real Python process under qemu's user-mode
emulator, whose CPUID reports the family and model we ask for, so LLVM's own host-CPU detection sees
an unknown CPU exactly as it does on a Zen 5 host.  A control run with a known family (25, Zen 3)
shows that the family, not the emulator, is what breaks pip's PoCL.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from unifl.core.backend import ProbeResult
from tests.helpers.paths import ROOT as REPO_ROOT

ROOT = REPO_ROOT
QEMU = shutil.which("qemu-x86_64")
#: CPUID of an AMD family-26 (Zen 5) part; "max" keeps every feature the emulator implements
UNKNOWN_CPU = "max,vendor=AuthenticAMD,family=26,model=2"
KNOWN_CPU = "max,vendor=AuthenticAMD,family=25,model=1"

needs_qemu = pytest.mark.skipif(
    QEMU is None or platform.machine() != "x86_64",
    reason="qemu-x86_64 (Debian's qemu-user) simulates the CPU; .ci/run installs it")

PROBE = """
import secrets, unifl
from unifl.core import registry
from unifl.backends.fpga import runtime
if {reverse}:      # the other loader order: whichever platform is listed first, the one that builds wins
    listed = runtime.list_devices
    runtime.list_devices = lambda: list(reversed(listed()))
pr = registry.probe("fpga")
print("PROBE", pr.available, pr.remedy)
print("REASON", pr.reason)
if pr.available and {exact}:
    from unifl.base_op import mont_context, mont_mul, mont_mul_ref, from_limbs
    be = unifl.backend("fpga")
    m = secrets.randbits(256) | (1 << 255) | 1
    ctx = mont_context(m)
    a = [0, 1, m - 1] + [secrets.randbelow(m) for _ in range(5)]
    got = from_limbs(mont_mul(be, ctx, ctx.to_limbs(a), ctx.to_limbs(a)))
    print("EXACT" if got == [mont_mul_ref(x, x, m) for x in a] else "WRONG")
    print("PLATFORM", be.runtime.platform.version)
"""


def _run_as(cpu: str, code: str, *, pip_pocl_only: bool, tmp_path: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("UNIFL_FPGA_PLATFORM", None)
    env.pop("UNIFL_FPGA_DEVICE", None)
    if pip_pocl_only:
        # no system ICD: the loader then sees only the PoCL that pip put beside pyopencl
        vendors = tmp_path / "no-system-icds"
        vendors.mkdir(exist_ok=True)
        env["OCL_ICD_VENDORS"] = str(vendors)
    assert QEMU is not None
    out = subprocess.run([QEMU, "-cpu", cpu, sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _system_pocl() -> bool:
    """A PoCL ICD registered by a system package (not pip's copy beside pyopencl)."""
    vendors = Path("/etc/OpenCL/vendors")
    return vendors.is_dir() and any("pocl" in f.read_text(errors="replace").lower()
                                    for f in vendors.glob("*.icd"))


@needs_qemu
def test_pip_pocl_alone_on_an_unknown_cpu_is_unavailable_with_the_fix(tmp_path):
    """Only pip's PoCL, on a family-26 CPU: the probe compiles before it answers, so it says
    unavailable (it used to say available and then fail every build), names the compiler's
    refusal, and carries the install command that fixes it."""
    out = _run_as(UNKNOWN_CPU, PROBE.format(exact=False, reverse=False), pip_pocl_only=True, tmp_path=tmp_path)
    assert "PROBE False" in out, out
    reason = out.split("REASON ", 1)[1]
    assert "LLVM 14" in reason and "'unknown target CPU generic'" in reason, reason
    assert "sudo apt-get install -y --no-install-recommends pocl-opencl-icd" in reason
    assert "('apt-get', 'install', '-y', '--no-install-recommends', 'pocl-opencl-icd')" in out


@needs_qemu
def test_pip_pocl_on_a_known_cpu_builds_under_the_same_emulator(tmp_path):
    """The control: same emulator, same PoCL, a family LLVM 14 knows: available."""
    out = _run_as(KNOWN_CPU, PROBE.format(exact=False, reverse=False), pip_pocl_only=True, tmp_path=tmp_path)
    assert "PROBE True" in out, out


@needs_qemu
@pytest.mark.skipif(not _system_pocl(), reason="no system PoCL (Debian's pocl-opencl-icd): "
                    "the fix this test checks is not installed here")
def test_system_pocl_runs_the_kernels_on_an_unknown_cpu(tmp_path):
    """With the system PoCL installed (what the fix installs), the same family-26 CPU runs the
    real montmul kernel, bit-exact, on the platform that can build: no fallback."""
    for reverse in (False, True):
        out = _run_as(UNKNOWN_CPU, PROBE.format(exact=True, reverse=reverse),
                      pip_pocl_only=False, tmp_path=tmp_path)
        assert "PROBE True" in out and "EXACT" in out, out
        assert "LLVM 14" not in out.split("PLATFORM", 1)[1], out


def test_devices_prints_the_remedy_when_not_root(monkeypatch):
    """`unifl devices --remedy` as an ordinary user prints the one command, runs nothing."""
    from typer.testing import CliRunner

    from unifl import cli
    from unifl.core import registry
    ran: list[object] = []
    monkeypatch.setitem(registry._probes, "fpga", ProbeResult(
        False, "cannot build kernels", remedy=(("apt-get", "update", "-qq"),
                                               ("apt-get", "install", "-y", "pocl-opencl-icd"))))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    out = CliRunner().invoke(cli.app, ["devices", "--remedy"])
    assert out.exit_code == 0, out.output
    assert ("sudo apt-get update -qq && sudo apt-get install -y pocl-opencl-icd"
            in " ".join(out.output.split())), out.output
    assert ran == []


def test_devices_runs_the_remedy_as_root_then_probes_again(monkeypatch):
    """As root, each command runs in order, then a new process probes again (an ICD loader lists
    its platforms once per process); a failing command stops the rest."""
    from typer.testing import CliRunner

    from unifl import cli
    from unifl.core import registry
    ran: list[list[str]] = []

    class Done:
        def __init__(self, rc: int) -> None:
            self.returncode = rc

    def fake_run(argv, check=False):  # noqa: ANN001 - subprocess.run's shape
        ran.append(list(argv))
        return Done(1 if argv[0] == "false" else 0)

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setitem(registry._probes, "fpga", ProbeResult(
        False, "x", remedy=(("true",), ("echo", "installed"))))
    assert CliRunner().invoke(cli.app, ["devices", "--remedy"]).exit_code == 0
    assert ran == [["true"], ["echo", "installed"], [sys.executable, "-m", "unifl", "devices"]]
    ran.clear()
    monkeypatch.setitem(registry._probes, "fpga", ProbeResult(
        False, "x", remedy=(("false",), ("echo", "never"))))
    assert CliRunner().invoke(cli.app, ["devices", "--remedy"]).exit_code == 0
    assert ran == [["false"]]
