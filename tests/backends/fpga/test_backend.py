"""The ``fpga`` backend on whatever OpenCL device is present (PoCL on the CPU here and in CI):
bit-exactness against the ``cpu`` reference in both modes, the buffer ring, the prebuilt-binary path,
the RTL library's emulation model, and the refusals (no platform, wrong binary, build errors)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from unifl.mod_op import ints
import unifl
from unifl.core.montgomery import mont_mul_ref
from unifl.core.errors import BackendUnavailable, ConfigError
from tests.helpers.paths import ROOT as REPO_ROOT

ROOT = REPO_ROOT


def _fpga(**opts):
    pr = unifl.core.registry.probe("fpga")
    if not pr.available:
        pytest.skip(f"fpga backend unavailable: {pr.reason}")
    return unifl.backend("fpga", **opts)


@pytest.fixture(scope="module", params=["montmul", "modexp"])
def fpga(request):
    return _fpga(mode=request.param)


def _modulus(bits: int) -> int:
    return (1 << (bits - 1)) | secrets.randbits(bits - 1) | 1


def _operands(m: int, n: int) -> tuple[list[int], list[int]]:
    edges_a = [0, 1, m - 1, m - 1, m - 2, (1 << 64) % m]
    edges_b = [m - 1, m - 1, m - 1, 1, m - 1, m - 1]
    a = edges_a + [secrets.randbelow(m) for _ in range(n)]
    b = edges_b + [secrets.randbelow(m) for _ in range(n)]
    return a, b


SIZES = [64, 65, 127, 256, 512, 1000, 1024, 2048, 3072, 4096]


@pytest.mark.parametrize("bits", SIZES)
def test_mont_mul_matches_cpu(fpga, bits):
    cpu = unifl.backend("cpu")
    for m in (_modulus(bits), (1 << bits) - 1):
        a, b = _operands(m, 40)
        got = ints.mont_mul(fpga, a, b, m)
        assert got == ints.mont_mul(cpu, a, b, m)
        assert got == [mont_mul_ref(x, y, m) for x, y in zip(a, b)]


@pytest.mark.parametrize("bits", [64, 256, 1024, 2048])
def test_mod_mul_and_mod_exp_match_cpu(fpga, bits):
    cpu = unifl.backend("cpu")
    m = _modulus(bits)
    a, b = _operands(m, 12)
    assert ints.mod_mul(fpga, a, b, m) == ints.mod_mul(cpu, a, b, m)
    exps = [secrets.randbits(bits) for _ in a]
    exps[0], exps[1], exps[2] = 0, 1, (1 << (bits + 70)) - 1   # zero, one, longer than m
    assert ints.mod_exp(fpga, a, exps, m) == [pow(x, e, m) for x, e in zip(a, exps)]
    for e in (0, 1, 2, 65537, m - 2):                          # shared exponents
        assert ints.mod_exp(fpga, a, e, m) == [pow(x, e, m) for x in a]


def test_mod_exp_4096_shared(fpga):
    m = _modulus(4096)
    a = [secrets.randbelow(m) for _ in range(4)]
    e = secrets.randbits(1024)
    assert ints.mod_exp(fpga, a, e, m) == [pow(x, e, m) for x in a]


def test_implements_reflects_mode():
    assert not _fpga(mode="montmul").implements("mont_exp")
    be = _fpga(mode="modexp")
    assert be.implements("mont_exp") and be.implements("mont_mul")
    assert not be.implements("mod_exp")     # composed: to_mont, device loop, from_mont


def test_ring_of_chunks_and_engines():
    """Many chunks through 2 ring slots, an odd engine count and local size: same results."""
    be = _fpga(chunk=7, in_flight=2, engines=5, local_size=2, mode="modexp")
    m = _modulus(256)
    a, b = _operands(m, 60)
    assert ints.mont_mul(be, a, b, m) == [mont_mul_ref(x, y, m) for x, y in zip(a, b)]
    exps = [secrets.randbits(200) for _ in a]
    assert ints.mod_exp(be, a, exps, m) == [pow(x, e, m) for x, e in zip(a, exps)]


def test_window_option():
    be = _fpga(mode="modexp", window=1)
    m = _modulus(512)
    a = [secrets.randbelow(m) for _ in range(5)]
    e = [secrets.randbits(300) for _ in a]
    assert ints.mod_exp(be, a, e, m) == [pow(x, y, m) for x, y in zip(a, e)]


def test_limb_arrays_and_device_state():
    """The limb-level op: constants uploaded once per context and instance, results (N, L) uint64;
    another instance (another card) never sees this one's buffers."""
    from unifl.base_op import mont_context, mont_mul
    be = _fpga(mode="montmul")           # options given: an instance of its own, no state yet
    assert len(be.state) == 0
    m = _modulus(1024)
    ctx = mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(9)])
    out = mont_mul(be, ctx, a, a)
    assert out.dtype == np.uint64 and out.shape == a.shape
    buf = be.state.peek(ctx, "constants")
    assert buf is not None and len(be.state) == 1
    mont_mul(be, ctx, a, a)
    assert be.state.peek(ctx, "constants") is buf and len(be.state) == 1
    other = _fpga(engines=16)            # options given: a new instance, as for a second card
    assert other.state.peek(ctx, "constants") is None
    assert np.array_equal(mont_mul(other, ctx, a, a), out)
    assert other.state.peek(ctx, "constants") is not buf


def test_config_errors():
    with pytest.raises(ConfigError, match="mode"):
        _fpga(mode="bogus")
    with pytest.raises(ConfigError, match="engines"):
        _fpga(engines=0)


def test_platform_not_present_is_named():
    _fpga()
    with pytest.raises(BackendUnavailable, match="Intel\\(R\\) FPGA SDK"):
        unifl.backend("fpga", platform="Intel(R) FPGA SDK")


def test_prebuilt_binary_path(tmp_path):
    """all_sizes.cl compiled to a program binary on this device, then loaded with
    cl.Program(ctx, [dev], [binary]) -- the same path a .aocx / .xclbin takes."""
    _fpga()
    from unifl.backends.fpga.runtime import FpgaBuildError, compile_binary
    path = tmp_path / "kernels.bin"
    names = compile_binary(str(path))
    assert "montmul_L16" in names and "mont_exp_L32" in names
    for mode in ("montmul", "modexp"):
        be = unifl.backend("fpga", binary=str(path), mode=mode)
        assert be.runtime.binary_sizes() == [4, 8, 16, 32, 64]
        for bits in (1024, 2048):
            m = _modulus(bits)
            a, b = _operands(m, 10)
            assert ints.mont_mul(be, a, b, m) == [mont_mul_ref(x, y, m) for x, y in zip(a, b)]
            assert ints.mod_exp(be, a, 65537, m) == [pow(x, 65537, m) for x in a]
    m = _modulus(192)                          # 3 limbs: not in the binary
    with pytest.raises(FpgaBuildError, match="montmul_L3.*limb counts \\[4, 8, 16, 32, 64\\]"):
        ints.mont_mul(be, [1], [2], m)
    # asked at selection time instead of found mid-run (Backend.supports)
    from unifl.core.backend import Request
    assert be.supports(Request.paillier(2048))             # 1024, 2048, 4096 bits: 16, 32, 64 limbs
    no = be.supports(Request.paillier(4096))                # n² of 8192 bits: 128 limbs
    assert not no and "lacks montmul_L128, mont_exp_L128" in no.reasons[0]


def test_wrong_binary_is_refused_with_reason(tmp_path):
    _fpga()
    bad = tmp_path / "kernels.aocx"
    bad.write_bytes(b"this is not a program binary" * 10)
    with pytest.raises(BackendUnavailable, match="kernels.aocx.*rejected"):
        unifl.backend("fpga", binary=str(bad))
    with pytest.raises(BackendUnavailable, match="cannot be read"):
        unifl.backend("fpga", binary=str(tmp_path / "missing.xclbin"))


def test_build_error_shows_build_log():
    be = _fpga(build_options="-DL=-1")
    with pytest.raises(BackendUnavailable) as info:
        ints.mont_mul(be, [3], [5], _modulus(320))
    msg = str(info.value)
    assert "build log" in msg and "error" in msg and "-DL=5" in msg


def test_rtl_emulation_model_as_binary(tmp_path):
    """rtl/ocl_lib: the RTL library's emulation model + the kernel built on it, compiled here into a
    binary and loaded as fpga.binary: a drop-in montmul_L16, bit-exact."""
    _fpga()
    import pyopencl as cl
    from unifl.backends.fpga.runtime import kernel_dir
    be0 = _fpga()
    src = "\n".join((ROOT / f"rtl/ocl_lib/{f}").read_text() for f in
                    ("unifl_mm1024.cl", "unifl_mexp1024.cl", "montmul_rtl_kernel.cl"))
    ctx = cl.Context([be0.runtime.device])
    prog = cl.Program(ctx, src).build(options=[f"-I{kernel_dir()}"])
    path = tmp_path / "rtl_lib.bin"
    path.write_bytes(prog.get_info(cl.program_info.BINARIES)[0])
    be = unifl.backend("fpga", binary=str(path))
    assert be.runtime.binary_sizes() == [16]
    m = _modulus(1024)
    a, b = _operands(m, 30)
    assert ints.mont_mul(be, a, b, m) == [mont_mul_ref(x, y, m) for x, y in zip(a, b)]


def test_probe_without_platform_refuses(monkeypatch):
    """No OpenCL platform: probe says so and unifl.backend('fpga') raises BackendUnavailable."""
    from unifl.core import registry
    from unifl.backends.fpga import runtime

    class NoCl:
        class Error(Exception):
            pass

        @staticmethod
        def get_platforms():
            raise NoCl.Error("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(runtime, "import_cl", lambda: NoCl)
    monkeypatch.delitem(registry._probes, "fpga", raising=False)
    monkeypatch.delitem(registry._instances, "fpga", raising=False)
    pr = registry.probe("fpga")
    assert not pr.available and "no OpenCL platform" in pr.reason
    with pytest.raises(BackendUnavailable, match="no OpenCL platform.*PLATFORM_NOT_FOUND"):
        unifl.backend("fpga")
    monkeypatch.delitem(registry._probes, "fpga", raising=False)


def _pyopencl_without_bundled_icds(root: Path) -> Path:
    """A copy of the installed pyopencl (symlinks) whose ``.libs`` keeps the ICD loader but no
    bundled platform (PoCL from pip ships its ICD there): on ``sys.path`` first, with an empty
    OCL_ICD_VENDORS, a process sees no OpenCL platform at all."""
    import pyopencl
    src = Path(pyopencl.__file__).parent
    dst = root / "pyopencl"
    dst.mkdir(parents=True)
    for entry in src.iterdir():
        if entry.name != ".libs":
            (dst / entry.name).symlink_to(entry)
    (dst / ".libs").mkdir()
    for lib in (src / ".libs").iterdir() if (src / ".libs").is_dir() else []:
        if not (lib.name.endswith(".icd") or lib.name.startswith("libpocl")):
            (dst / ".libs" / lib.name).symlink_to(lib)
    return root


def test_no_icd_in_a_fresh_process(tmp_path):
    """A real process whose ICD loader finds nothing (no system ICDs, none bundled) gets a clear
    refusal."""
    code = ("import unifl\n"
            "try:\n    unifl.backend('fpga')\nexcept unifl.BackendUnavailable as e:\n"
            "    print('REFUSED', e)\nelse:\n    print('AVAILABLE')\n")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    shadow = _pyopencl_without_bundled_icds(tmp_path / "site")
    env = dict(os.environ, OCL_ICD_VENDORS=str(vendors),
               PYTHONPATH=os.pathsep.join([str(shadow), str(ROOT)]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert "REFUSED" in out.stdout and "OpenCL" in out.stdout, out


def test_pocl_from_pip_alone_runs_the_kernels(tmp_path):
    """A machine without a system OpenCL package: with no system ICD (empty OCL_ICD_VENDORS), the
    PoCL that pip installed beside pyopencl is the platform, and the kernel is exact on it."""
    code = ("import secrets, unifl\n"
            "from unifl.base_op import mont_context, mont_mul, mont_mul_ref, from_limbs\n"
            "be = unifl.backend('fpga')\n"
            "m = secrets.randbits(1024) | (1 << 1023) | 1\n"
            "ctx = mont_context(m)\n"
            "a = [secrets.randbelow(m) for _ in range(9)]\n"
            "ok = from_limbs(mont_mul(be, ctx, ctx.to_limbs(a), ctx.to_limbs(a))) == "
            "[mont_mul_ref(x, x, m) for x in a]\n"
            "print('EXACT' if ok else 'WRONG', be.describe(), be.runtime.platform.version)\n")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    env = dict(os.environ, OCL_ICD_VENDORS=str(vendors), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.startswith("EXACT") and "PoCL" in out.stdout, (out.stdout, out.stderr[-2000:])


def test_rtl_emulation_model_on_pip_pocl_alone(tmp_path):
    """The RTL library's kernels pass ulong16 values; on pip's PoCL alone (no system ICD) both
    library functions (unifl_mm1024, unifl_mexp1024 in mode modexp) are still bit-exact.  On a CPU
    with AVX-512 that LLVM 14 names without it (AMD Zen 4 is 'znver3' there), that PoCL's builtin
    library takes 512-bit vectors in registers while the kernel passes them in memory, so the
    kernels move vectors element by element (unifl_v16.h), never through vload16/vstore16."""
    code = ("import secrets, unifl, pyopencl as cl\n"
            "from unifl.mod_op import ints\n"
            "from unifl.base_op import mont_mul_ref\n"
            "from unifl.backends.fpga.runtime import kernel_dir\n"
            f"src = '\\n'.join(open({str(ROOT / 'rtl/ocl_lib')!r} + '/' + f).read() for f in "
            "('unifl_mm1024.cl', 'unifl_mexp1024.cl', 'montmul_rtl_kernel.cl'))\n"
            "be0 = unifl.backend('fpga')\n"
            "prog = cl.Program(cl.Context([be0.runtime.device]), src)"
            ".build(options=[f'-I{kernel_dir()}'])\n"
            f"path = {str(tmp_path / 'rtl_lib.bin')!r}\n"
            "open(path, 'wb').write(prog.get_info(cl.program_info.BINARIES)[0])\n"
            "m = secrets.randbits(1024) | (1 << 1023) | 1\n"
            "a = [0, 1, m - 1] + [secrets.randbelow(m) for _ in range(13)]\n"
            "b = [m - 1, 1, m - 1] + [secrets.randbelow(m) for _ in range(13)]\n"
            "be = unifl.backend('fpga', binary=path)\n"
            "ok = ints.mont_mul(be, a, b, m) == [mont_mul_ref(x, y, m) for x, y in zip(a, b)]\n"
            "exp = unifl.backend('fpga', binary=path, mode='modexp')\n"
            "e = secrets.randbits(1024)\n"
            "ok &= ints.mod_exp(exp, a, e, m) == [pow(x, e, m) for x in a]\n"
            "print('EXACT' if ok else 'WRONG', be.runtime.platform.version)\n")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    env = dict(os.environ, OCL_ICD_VENDORS=str(vendors), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    if "no OpenCL device here can build kernels" in out.stderr:
        pytest.skip("pip's PoCL cannot build kernels on this CPU (tests/backends/fpga/test_unknown_cpu.py)")
    assert out.stdout.startswith("EXACT"), (out.stdout, out.stderr[-2000:])


def test_squaring_uploads_once():
    """b is a: the kernel reads one device buffer for both operands; results stay exact."""
    from unifl.base_op import mont_context, mont_mul
    be = _fpga(chunk=5)
    m = _modulus(2048)
    ctx = mont_context(m)
    vals = [secrets.randbelow(m) for _ in range(13)] + [m - 1]
    a = ctx.to_limbs(vals)
    out = mont_mul(be, ctx, a, a)
    from unifl.base_op import from_limbs
    assert from_limbs(out) == [mont_mul_ref(x, x, m) for x in vals]
    assert all("b" not in slot.bufs for slot in be.runtime.slots)


def test_without_pyopencl_the_probe_says_how_to_get_it():
    """`import unifl` never needs pyopencl; the probe names what is missing."""
    code = ("import sys; sys.modules['pyopencl'] = None\n"
            "import unifl\nfrom unifl.core import registry\n"
            "pr = registry.probe('fpga'); print(pr.available, pr.reason)\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("False") and "pyopencl is not installed" in out.stdout, out


# ------------------------------------------------------------------ typed device faults
def _refusing(message: str):
    """A stand-in for an OpenCL entry point the driver refuses (pyopencl's own error type)."""
    import pyopencl as cl

    def refuse(*args, **kwargs):
        raise cl.RuntimeError(message)
    return refuse


@pytest.mark.parametrize("mode", ["montmul", "modexp"])
def test_opencl_failure_mid_run_is_a_named_device_error(mode, monkeypatch):
    """A launch, and a wait, that the driver refuses mid-run: FpgaDeviceError (a DeviceError) naming
    the device and the OpenCL call, the driver's error chained; the fallback chain takes it."""
    import pyopencl as cl
    from unifl.backends.fpga.runtime import FpgaDeviceError
    from unifl.base_op import mont_context
    from unifl.core.errors import DeviceError
    from unifl.scheduler.fallback import is_device_failure
    be = _fpga(mode=mode, engines=4)
    m = _modulus(1024)
    ctx = mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(6)])
    e = ctx.to_limbs([secrets.randbits(100) for _ in range(6)])
    run = (lambda: be.op_mont_mul(ctx, a, a)) if mode == "montmul" else \
        (lambda: be.op_mont_exp(ctx, a, e))
    kernel = "montmul" if mode == "montmul" else "mont_exp"
    good = run()                                        # builds the kernel, uploads the constants
    monkeypatch.setitem(be.runtime._kernels, (kernel, ctx.num_limbs),
                        _refusing("clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES"))
    with pytest.raises(FpgaDeviceError) as info:
        run()
    err = info.value
    assert isinstance(err, DeviceError) and is_device_failure(err, be)
    assert f"clEnqueueNDRangeKernel ({kernel}_L{ctx.num_limbs})" in str(err)
    assert be.runtime.describe() in str(err) and "OUT_OF_RESOURCES" in str(err)
    assert isinstance(err.__cause__, cl.Error)
    monkeypatch.undo()
    assert np.array_equal(run(), good)                  # the runtime itself is intact
    monkeypatch.setattr(cl, "wait_for_events",
                        _refusing("clWaitForEvents failed: EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"))
    with pytest.raises(FpgaDeviceError, match="OpenCL clWaitForEvents failed on .*EXEC_STATUS"):
        run()


def test_fpga_failing_mid_run_falls_back_bit_identically(monkeypatch):
    """Through the scheduler: the failed batch is re-run on the next backend of the chain, with
    results bit-identical to cpu, and the report names the OpenCL call that failed."""
    import pyopencl as cl
    from unifl import base_op, mod_op
    from unifl.configs import PartyConfig
    from unifl.scheduler import backend_from_config
    _fpga()                                             # skips without an OpenCL device
    be = backend_from_config(PartyConfig(party="guest", backend="fpga", fallback=["cpu"]))
    assert be.selection.chosen == "fpga"
    ctx = base_op.mont_context(_modulus(1024))
    a = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(10)])
    exps = mod_op.exp_limbs([secrets.randbits(64) for _ in range(10)])
    monkeypatch.setattr(cl, "enqueue_copy", _refusing("clEnqueueWriteBuffer failed: "
                                                      "MEM_OBJECT_ALLOCATION_FAILURE"))
    cpu = unifl.backend("cpu")
    assert np.array_equal(mod_op.mod_exp(be, ctx, a, exps), mod_op.mod_exp(cpu, ctx, a, exps))
    ev = be.fallback_events()[0]
    assert (ev["from"], ev["to"]) == ("fpga", "cpu") and ev["reason"].startswith("FpgaDeviceError")
    assert "clEnqueueWriteBuffer" in ev["reason"]
    be.close()


# ------------------------------------------------------------------ binary kinds and launch shape
def test_binary_kind_from_magic():
    """The kind comes from the first bytes, not the file name; only impossible pairs are refused."""
    from unifl.backends.fpga.runtime import binary_kind, binary_mismatch
    assert binary_kind(b"xclbin2\0" + bytes(64)) == "xclbin"
    assert binary_kind(b"\x7fELF\x02\x01\x01" + bytes(64)) == "elf"
    assert binary_kind(b"poclbin\0" + bytes(64)) == "pocl"
    assert binary_kind(b"xclbin1") == "unknown" and binary_kind(b"") == "unknown"
    pocl, xrt, intel = ("Portable Computing Language", "Xilinx",
                        "Intel(R) FPGA SDK for OpenCL(TM)")
    assert "XRT" in binary_mismatch("xclbin", pocl) and binary_mismatch("xclbin", xrt) is None
    assert "only .xclbin" in binary_mismatch("elf", xrt)
    assert "only .xclbin" in binary_mismatch("pocl", xrt)
    assert binary_mismatch("elf", intel) is None and binary_mismatch("unknown", intel) is None
    assert "poclbin" in binary_mismatch("elf", pocl) and binary_mismatch("pocl", pocl) is None
    assert "only on PoCL" in binary_mismatch("pocl", intel)


@pytest.mark.parametrize("name,header,kind", [
    ("kernels.xclbin", b"xclbin2\0", "Xilinx .xclbin"),
    ("kernels.aocx", b"\x7fELF\x02\x01\x01\0", "ELF program binary .*Intel FPGA .aocx"),
    ("misnamed.bin", b"xclbin2\0", "Xilinx .xclbin"),          # the magic decides, not the name
])
def test_foreign_binary_kind_is_named_with_the_platform(tmp_path, name, header, kind):
    """A vendor binary on the wrong platform (here: PoCL) is refused before the driver sees it,
    naming the binary's kind and the platform that was found."""
    be0 = _fpga()
    if not be0.runtime.stand_in:
        pytest.skip(f"the platform is {be0.describe()}, not PoCL")
    from unifl.backends.fpga.runtime import FpgaBuildError
    path = tmp_path / name
    path.write_bytes(header + secrets.token_bytes(512))
    platform = be0.runtime.platform.name.strip()
    with pytest.raises(FpgaBuildError, match=f"{name}.* is an? {kind}.*platform is "
                                             f"'{platform}'"):
        unifl.backend("fpga", binary=str(path))


def test_pocl_binary_round_trip_through_the_binary_option(tmp_path):
    """A PoCL-built program's own binary (prog.binaries), saved to a file and loaded back through
    ``binary:``: recognised as a PoCL binary, launched as an NDRange of min(engines, rows), and
    bit-exact."""
    be0 = _fpga()
    if not be0.runtime.stand_in:
        pytest.skip(f"the platform is {be0.describe()}, not PoCL")
    import pyopencl as cl
    from unifl.backends.fpga.runtime import binary_kind, kernel_source
    ctx = cl.Context([be0.runtime.device])
    prog = cl.Program(ctx, kernel_source()).build(options=["-DL=16"])
    blob = prog.get_info(cl.program_info.BINARIES)[0]
    assert binary_kind(blob) == "pocl"
    path = tmp_path / "montmul_L16.bin"
    path.write_bytes(blob)
    be = unifl.backend("fpga", binary=str(path), engines=3)
    assert be.runtime.binary_kind == "pocl" and not be.runtime.launch_as_task
    assert be.runtime.binary_sizes() == [16]
    shapes = _record_launch_shapes(be, "montmul", 16)
    m = _modulus(1024)
    a, b = _operands(m, 9)
    assert ints.mont_mul(be, a, b, m) == [mont_mul_ref(x, y, m) for x, y in zip(a, b)]
    assert shapes and all(s == ((3,), (1,)) for s in shapes), shapes


def _record_launch_shapes(be, name: str, limbs: int) -> list:
    """Wrap the backend's kernel ``name_L<limbs>`` so each launch records (global, local)."""
    real = be.runtime.kernel(name, limbs)
    shapes: list = []

    def launch(queue, gsz, lsz, *args):
        shapes.append((tuple(gsz), None if lsz is None else tuple(lsz)))
        return real(queue, gsz, lsz, *args)
    be.runtime._kernels[(name, limbs)] = launch
    return shapes


@pytest.mark.parametrize("mode", ["montmul", "modexp"])
def test_xclbin_is_launched_as_one_task(tmp_path, mode):
    """An .xclbin's compute unit is launched with clEnqueueTask semantics (global = local = 1)
    whatever ``engines`` says.  No XRT here: the PoCL binary stands in for the program, with the
    runtime told it loaded an .xclbin, so the real launch path runs with the task shape -- and the
    kernels, which stride over the rows by their global size, stay bit-exact with one work-item."""
    _fpga()
    from unifl.backends.fpga.runtime import compile_binary
    path = tmp_path / "kernels.bin"
    compile_binary(str(path))
    be = unifl.backend("fpga", binary=str(path), engines=8, mode=mode, chunk=5)
    be.runtime.binary_kind = "xclbin"
    assert be.runtime.launch_as_task
    kernel = "montmul" if mode == "montmul" else "mont_exp"
    shapes = _record_launch_shapes(be, kernel, 16)
    m = _modulus(1024)
    a, b = _operands(m, 6)
    if mode == "montmul":
        assert ints.mont_mul(be, a, b, m) == [mont_mul_ref(x, y, m) for x, y in zip(a, b)]
    else:
        assert ints.mod_exp(be, a, 65537, m) == [pow(x, 65537, m) for x in a]
    assert len(shapes) == 3 and all(s == ((1,), (1,)) for s in shapes), shapes  # 12 rows, chunk 5


@pytest.mark.parametrize("mode", ["montmul", "modexp"])
def test_xclbin_rows_left_unwritten_are_refused(tmp_path, mode):
    """An .xclbin's out buffer is filled with all-ones rows before each launch and every row read
    back must lie below m: a kernel that does not write its rows (what a failed AXI write leaves)
    or writes all ones (what the RTL kernels write after an AXI read error) is refused with
    FpgaDeviceError, never returned.  Stand-in: the PoCL binary with the runtime told it loaded an
    .xclbin, and the kernel launch replaced by one that writes nothing."""
    _fpga()
    from unifl.backends.fpga.runtime import FpgaDeviceError, compile_binary
    path = tmp_path / "kernels.bin"
    compile_binary(str(path))
    be = unifl.backend("fpga", binary=str(path), mode=mode)
    be.runtime.binary_kind = "xclbin"
    kernel = "montmul" if mode == "montmul" else "mont_exp"
    be.runtime._kernels[(kernel, 16)] = lambda queue, gsz, lsz, *args: None
    m = _modulus(1024)
    a, b = _operands(m, 4)
    with pytest.raises(FpgaDeviceError, match=r"of \d+ rows at or above the modulus \(first: row 0\)"):
        if mode == "montmul":
            ints.mont_mul(be, a, b, m)
        else:
            ints.mod_exp(be, a, 65537, m)


def test_rtl_library_modexp_emulation_model_as_binary(tmp_path):
    """rtl/ocl_lib in mode modexp: both emulation models and the kernels built on them compiled
    into one binary and loaded as fpga.binary: mont_exp_L16 on unifl_mexp1024 (fixed 4-bit windows,
    the RTL unit's schedule) is bit-exact with pow, and a launch with an exponent longer than the
    unit holds (1024 bits) comes back as all-ones rows, refused with FpgaDeviceError."""
    _fpga()
    import pyopencl as cl
    from unifl.backends.fpga.runtime import FpgaDeviceError, kernel_dir
    be0 = _fpga()
    src = "\n".join((ROOT / f"rtl/ocl_lib/{f}").read_text() for f in
                    ("unifl_mm1024.cl", "unifl_mexp1024.cl", "montmul_rtl_kernel.cl"))
    ctx = cl.Context([be0.runtime.device])
    prog = cl.Program(ctx, src).build(options=[f"-I{kernel_dir()}"])
    path = tmp_path / "rtl_lib.bin"
    path.write_bytes(prog.get_info(cl.program_info.BINARIES)[0])
    be = unifl.backend("fpga", binary=str(path), mode="modexp")
    m = _modulus(1024)
    a, _ = _operands(m, 7)
    for e in (65537, (1 << 1024) - 1, 0, 1):
        assert ints.mod_exp(be, a, e, m) == [pow(x, e, m) for x in a], e
    with pytest.raises(FpgaDeviceError, match="rows at or above the modulus"):
        ints.mod_exp(be, a[:2], 1 << 1024, m)


def test_modexp_mode_encrypts_on_the_device():
    """mode modexp: paillier_encrypt is native (paillier_enc_L<n>: the whole (1 + m·n)·r^n mod n²
    in one launch, m and r in, the ciphertext out, the kernel the RTL encryption mirrors) and
    bit-exact with cpu, edge plaintexts (0, n-1) and r = 1 included; mode montmul composes it."""
    from unifl.phe_sdk.paillier import keygen
    be = _fpga(mode="modexp")
    assert be.implements("paillier_encrypt") and not _fpga().implements("paillier_encrypt")
    pk, _sk = keygen(1024)
    n = pk.n
    ms = [0, n - 1, 1] + [int.from_bytes(os.urandom(130), "little") % n for _ in range(5)]
    rs = [1, n - 1, 2] + [int.from_bytes(os.urandom(130), "little") % (n - 1) + 1 for _ in range(5)]
    got = pk.raw_encrypt(ms, backend=be, r_values=rs)
    want = pk.raw_encrypt(ms, backend="cpu", r_values=rs)
    assert got == want == [(1 + m * n) * pow(r, n, n * n) % (n * n) for m, r in zip(ms, rs)]
