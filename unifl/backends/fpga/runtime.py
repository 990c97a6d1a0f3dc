"""OpenCL host runtime of the ``fpga`` backend (PyOpenCL).

What runs on the device is the BASE OP only (MontMult, ``montmul_L<n>``) and, in ``mode="modexp"``,
the FLASH-style exponentiation loop over it (``mont_exp_L<n>``); see ``kernels/montmul.cl``.

Two ways to get a program, chosen by the ``binary`` option:

* build from source (any OpenCL 1.2 device, PoCL on the CPU here): ``montmul.cl`` compiled with
  ``-DL=<limbs>`` the first time a modulus of that limb count is seen, cached per limb count;
* a prebuilt binary (``.aocx`` for Intel FPGA, ``.xclbin`` for Xilinx, or any program binary the
  device accepts), loaded with ``cl.Program(ctx, [device], [bytes])``: built offline from
  ``kernels/all_sizes.cl`` (or an RTL kernel, ``rtl/xilinx``), it carries ``montmul_L<n>`` for a
  fixed list of limb counts.  Its kind is read from its first bytes (:func:`binary_kind`) and
  checked against the platform before the driver sees it, so a binary for the other vendor is
  refused with both names.

Launch shape: an NDRange of ``min(engines, rows)`` work-items (each strides over the rows) for a
program built from source, a PoCL binary or an ``.aocx``; one work-item (``clEnqueueTask``: global
and local size 1) for an ``.xclbin``.  XRT runs a kernel as one compute-unit task, AMD's Vitis guide
recommends ``clEnqueueTask`` for a single compute unit, and an RTL kernel has no work-items at all:
it takes ``n`` and walks every row itself, as the source kernels do when their global size is 1.
A batch goes out whole: one launch per chunk, MontMult or whole exponentiation alike, so a binary
that carries ``mont_exp_L<n>`` built on the RTL exponentiation unit (``rtl/xilinx``: an .xclbin;
``rtl/ocl_lib``: an .aocx) runs ``mode: modexp`` with the chunk's operands and results as the only
transfers.

Results of a prebuilt binary are checked: the output buffer is filled with all-ones rows before
the launch and every row read back must lie below the modulus.  The RTL kernels write all-ones
rows after a memory (AXI RRESP) error or for an exponent longer than the unit holds, and a row
whose write failed (BRESP) keeps the fill; no MontMult or exponentiation returns such a row, so
either is refused with :class:`FpgaDeviceError`.

Batches are cut in chunks that cycle through a ring of device buffer sets, one in-order command queue
per slot, so the upload of chunk k+1 overlaps the kernel of chunk k and the download of chunk k-1
(the HLS paper's §3.3 overlap of transfer and compute).  pyopencl is imported lazily.

Failures: an OpenCL call that fails once the runtime is up (a buffer that cannot be allocated, a
transfer or launch the driver refuses, a wait that reports a failed command: a reset or lost card)
raises :class:`FpgaDeviceError`, a :class:`~unifl.core.errors.DeviceError` naming the device and the
failing call, so the scheduler hands the batch to the next backend of the party's chain.  A program
that cannot be built or a kernel size missing from a prebuilt binary raises :class:`FpgaBuildError`
(this backend cannot run that size here at all).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from importlib import resources
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from ...core.errors import BackendUnavailable, DeviceError
from ...core.limbs import less_than

if TYPE_CHECKING:       # for annotations only: pyopencl itself is imported lazily (import_cl)
    import pyopencl

KERNEL_DIR_PACKAGE = "unifl.backends.fpga"
#: The stand-in we run on when no FPGA is present.
POCL_NAMES = ("portable computing language", "pocl")


#: First bytes of the program binaries this runtime tells apart (see :func:`binary_kind`).
XCLBIN_MAGIC = b"xclbin2"          # AMD/Xilinx .xclbin (axlf container, XRT)
ELF_MAGIC = b"\x7fELF"             # Intel FPGA .aocx (an ELF container); GPU code objects too
POCL_MAGIC = b"poclbin"            # PoCL's own program binaries (what prog.binaries returns there)

#: kind -> (what it is, for messages)
BINARY_KINDS = {
    "xclbin": "a Xilinx .xclbin (magic 'xclbin2')",
    "elf": "an ELF program binary (an Intel FPGA .aocx, or a GPU code object)",
    "pocl": "a PoCL program binary (magic 'poclbin')",
    "unknown": "a binary of unknown kind: no xclbin2, ELF or poclbin magic",
}


def binary_kind(blob: bytes) -> str:
    """``"xclbin"``, ``"elf"``, ``"pocl"`` or ``"unknown"``, from the first bytes of ``blob``."""
    if blob.startswith(XCLBIN_MAGIC):
        return "xclbin"
    if blob.startswith(ELF_MAGIC):
        return "elf"
    if blob.startswith(POCL_MAGIC):
        return "pocl"
    return "unknown"


def binary_mismatch(kind: str, platform_name: str) -> str | None:
    """Why a binary of ``kind`` cannot load on the platform named ``platform_name`` (None: let the
    driver decide).  Only pairs that can never work are refused here: an .xclbin off XRT, anything
    but an .xclbin on XRT, a foreign binary on PoCL, a PoCL binary off PoCL."""
    name = platform_name.lower()
    xilinx = "xilinx" in name
    pocl = any(s in name for s in POCL_NAMES)
    if kind == "xclbin" and not xilinx:
        return "an .xclbin loads only on XRT's OpenCL platform 'Xilinx'"
    if xilinx and kind != "xclbin":
        return "XRT's platform 'Xilinx' loads only .xclbin files (built with v++)"
    if pocl and kind in ("elf", "xclbin"):
        return "PoCL loads only its own program binaries (magic 'poclbin')"
    if kind == "pocl" and not pocl:
        return "a PoCL program binary loads only on PoCL"
    return None


class FpgaBuildError(BackendUnavailable):
    """The OpenCL program could not be built or loaded (bad binary, compiler error, missing size).
    The message carries the device's build log."""


class FpgaDeviceError(DeviceError):
    """An OpenCL call failed on the device while running an op (allocation, transfer, launch, wait).
    The message names the platform / device and the failing call with the driver's error; the
    driver's exception is chained as ``__cause__``."""


def kernel_dir() -> str:
    """Folder holding ``montmul.cl`` and ``all_sizes.cl`` (shipped as package data)."""
    return str(resources.files(KERNEL_DIR_PACKAGE).joinpath("kernels"))


def kernel_source() -> str:
    with open(os.path.join(kernel_dir(), "montmul.cl"), encoding="utf-8") as fh:
        return fh.read()


def import_cl() -> ModuleType:
    """pyopencl, or BackendUnavailable saying how to get it."""
    try:
        import pyopencl as cl  # noqa: PLC0415 - optional dependency, imported lazily
    except ImportError as exc:
        raise BackendUnavailable(
            f"pyopencl is not installed ({exc}); `pip install pyopencl` and an OpenCL driver "
            "(for a CPU stand-in: `pip install pocl-binary-distribution`)") from exc
    return cl


def list_devices() -> list[tuple[pyopencl.Platform, pyopencl.Device]]:
    """All (platform, device) pairs the ICD loader sees; BackendUnavailable when there are none."""
    cl = import_cl()
    try:
        platforms = cl.get_platforms()
    except Exception as exc:  # noqa: BLE001 - pyopencl raises cl.LogicError/RuntimeError here
        raise BackendUnavailable(
            "no OpenCL platform: the ICD loader found none (looked in /etc/OpenCL/vendors, "
            f"OCL_ICD_VENDORS and pyopencl's bundled ICDs; {exc})") from exc
    pairs: list[tuple[pyopencl.Platform, pyopencl.Device]] = []
    for p in platforms:
        try:
            pairs.extend((p, d) for d in p.get_devices())
        except Exception:  # noqa: BLE001,S112 - a platform without devices is skipped
            continue
    if not pairs:
        raise BackendUnavailable("no OpenCL platform with a device: platforms found "
                                 f"{[p.name for p in platforms]} but none lists a device")
    return pairs


def is_pocl(platform: pyopencl.Platform) -> bool:
    return any(s in platform.name.lower() for s in POCL_NAMES)


def builds_from_source(device: pyopencl.Device) -> bool:
    """True for a device whose driver compiles OpenCL C at run time (a CPU: PoCL, Intel's CPU
    runtime); an FPGA platform runs offline-built binaries only (aoc / v++), so it is not asked to."""
    cl = import_cl()
    return bool(device.type & cl.device_type.CPU)


#: What the build check compiles: the 64x64->128-bit product and carry chain of montmul.cl's inner
#: loop, so a platform that passes it can build the real kernel's arithmetic.
CHECK_KERNEL = """
__kernel void unifl_build_check(__global ulong *x) {
    size_t i = get_global_id(0);
    ulong a = x[2 * i], b = x[2 * i + 1];
    ulong lo = a * b, hi = mul_hi(a, b);
    ulong s = lo + hi;
    x[2 * i] = s; x[2 * i + 1] = hi + (s < lo);
}
"""

#: The build log's words when PoCL's LLVM cannot name the host CPU (its getHostCPUName answers
#: "generic", which its clang refuses as a target CPU).
UNKNOWN_CPU_MARK = "unknown target cpu"

#: What installs a PoCL which picks its kernel library and target CPU by the CPU's features instead
#: of its name (Debian 12's PoCL 3.1 with LLVM 15, and Ubuntu's): the package lists, then the ICD.
SYSTEM_POCL_INSTALL = ("apt-get", "install", "-y", "--no-install-recommends", "pocl-opencl-icd")
SYSTEM_POCL_REMEDY = (("apt-get", "update", "-qq"), SYSTEM_POCL_INSTALL)

_build_checks: dict[tuple[str, str, str], str | None] = {}
_build_checks_lock = threading.Lock()


def host_cpu() -> str:
    """The host CPU as /proc/cpuinfo names it: model name, vendor, family and model numbers."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break                        # the first processor's block is enough
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return "this CPU"
    name = info.get("model name", "this CPU")
    fam, model = info.get("cpu family"), info.get("model")
    return f"{name} ({info.get('vendor_id', '?')}, family {fam}, model {model})" \
        if fam is not None else name


def explain_build_failure(platform: pyopencl.Platform, log: str) -> str:
    """Why ``platform`` cannot build kernels, and the fix, from its build ``log``."""
    version = platform.version.strip()
    if UNKNOWN_CPU_MARK in log.lower():
        return (f"{platform.name.strip()} ({version}) cannot build kernels on {host_cpu()}: its "
                "LLVM does not know this CPU, names it 'generic', and its compiler refuses that "
                "as a target CPU ('unknown target CPU generic'). Fix: a PoCL that picks its kernel "
                "library and target by CPU features -- on Debian/Ubuntu `sudo "
                f"{' '.join(SYSTEM_POCL_INSTALL)}` (PoCL 3.1, LLVM 15); UniFL then uses it "
                "(`make demo` runs this itself when it runs as root)")
    first = next((ln for ln in log.splitlines() if ln.strip()), "no build log")
    return f"{platform.name.strip()} ({version}) cannot build a small kernel: {first.strip()}"


def build_check(platform: pyopencl.Platform, device: pyopencl.Device) -> str | None:
    """None when ``device`` compiles and runs :data:`CHECK_KERNEL` exactly, else why not (with the
    fix).  Done once per (platform, version, device) in a process: a compiler that fails for this
    CPU fails for every kernel, and the check costs a compile."""
    key = (platform.name.strip(), platform.version.strip(), device.name.strip())
    with _build_checks_lock:
        if key in _build_checks:
            return _build_checks[key]
        _build_checks[key] = why = _run_build_check(platform, device)
        return why


def _run_build_check(platform: pyopencl.Platform, device: pyopencl.Device) -> str | None:
    cl = import_cl()
    prog: pyopencl.Program | None = None
    try:
        ctx = cl.Context([device])
        prog = cl.Program(ctx, CHECK_KERNEL)
        prog.build()
        queue = cl.CommandQueue(ctx)
        a, b = 0xFFFF_FFFF_FFFF_FFFB, 0xFFFF_FFFF_FFFF_FFC5
        host = np.array([a, b], dtype=np.uint64)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
        prog.unifl_build_check(queue, (1,), None, buf)
        cl.enqueue_copy(queue, host, buf)
        queue.finish()
    except Exception as exc:  # noqa: BLE001 - any driver failure means: cannot build here
        log = ""
        if prog is not None:
            try:
                log = str(prog.get_build_info(device, cl.program_build_info.LOG))
            except Exception:  # noqa: BLE001 - the log itself may be unavailable
                log = ""
        return explain_build_failure(platform, f"{log}\n{exc}")
    p = a * b
    lo, hi = p % 2**64, p >> 64
    s = (lo + hi) % 2**64
    want = [s, (hi + (s < lo)) % 2**64]
    if [int(v) for v in host] != want:
        return (f"{platform.name.strip()} ({platform.version.strip()}) built a small kernel "
                f"that computes 64-bit products wrongly ({[hex(int(v)) for v in host]} != "
                f"{[hex(v) for v in want]})")
    return None


def select_device(platform: str | None = None, device: str | None = None, *,
                  check_build: bool = True) -> tuple[pyopencl.Platform, pyopencl.Device]:
    """The first (platform, device) whose names contain the given substrings (case-insensitive)
    and, with ``check_build``, whose compiler builds :data:`CHECK_KERNEL` (CPU devices only: an
    FPGA platform loads offline-built binaries).

    With no names, a non-PoCL platform (a real accelerator) is preferred over PoCL.  When every
    candidate fails its build check, BackendUnavailable says why for each, with the fix.
    """
    pairs = list_devices()
    cand = [(p, d) for p, d in pairs
            if (platform is None or platform.lower() in p.name.lower())
            and (device is None or device.lower() in d.name.lower())]
    if not cand:
        seen = "; ".join(f"platform {p.name!r} device {d.name!r}" for p, d in pairs)
        raise BackendUnavailable(
            f"OpenCL platform {platform or '*'!r} with device {device or '*'!r} not present "
            f"(seen: {seen})")
    cand.sort(key=lambda pd: is_pocl(pd[0]))  # stable: real hardware first
    if not check_build:
        return cand[0]
    failures: list[str] = []
    for p, d in cand:
        why = build_check(p, d) if builds_from_source(d) else None
        if why is None:
            return p, d
        failures.append(why)
    unknown_cpu = any("'unknown target CPU generic'" in f for f in failures)
    raise BackendUnavailable("no OpenCL device here can build kernels: " + "; ".join(
        dict.fromkeys(failures)), remedy=SYSTEM_POCL_REMEDY if unknown_cpu else ())


@dataclass
class _Slot:
    """One set of device buffers of the ring, with its own in-order queue."""

    queue: pyopencl.CommandQueue
    #: name -> (buffer, nbytes)
    bufs: dict[str, tuple[pyopencl.Buffer, int]] = field(default_factory=dict)


class ClRuntime:
    """Context, programs per limb count, buffer ring and the two kernel launches."""

    def __init__(self, platform: str | None = None, device: str | None = None,
                 binary: str | None = None, engines: int = 16, chunk: int = 4096,
                 in_flight: int = 3, local_size: int | None = 1,
                 build_options: str = "") -> None:
        cl = self.cl = import_cl()
        self.platform: pyopencl.Platform
        self.device: pyopencl.Device
        self.platform, self.device = select_device(platform, device,
                                                   check_build=binary is None)
        self.stand_in = ("PoCL (OpenCL on the CPU)" if is_pocl(self.platform) else None)
        self.engines = max(1, int(engines))
        self.chunk = max(1, int(chunk))
        self.local_size = local_size
        self.build_options = build_options
        try:
            self.ctx: pyopencl.Context = cl.Context([self.device])
        except cl.Error as exc:
            raise BackendUnavailable(f"cannot open OpenCL device {self.device.name!r}: {exc}"
                                     ) from exc
        self.slots = [_Slot(cl.CommandQueue(self.ctx)) for _ in range(max(1, int(in_flight)))]
        # one batch at a time owns the ring: two threads sharing a backend (parties run in threads by
        # run_local, the scheduler's thread executor) would otherwise overwrite each other's slot
        # buffers between enqueue and read-back (seen as garbage results, not an error)
        self._lock = threading.RLock()
        self.binary_path = binary
        #: kind of the loaded prebuilt binary (:func:`binary_kind`); None: built from source
        self.binary_kind: str | None = None
        self._programs: dict[int, pyopencl.Program] = {}
        self._binary_program: pyopencl.Program | None = None
        self._kernels: dict[tuple[str, int], pyopencl.Kernel] = {}
        if binary is not None:
            self._binary_program = self._load_binary(binary)

    def describe(self) -> str:
        return f"{self.platform.name.strip()} / {self.device.name.strip()}"

    # ---- programs ---------------------------------------------------------------------------
    def _build_log(self, prog: pyopencl.Program) -> str:
        try:
            return str(prog.get_build_info(self.device, self.cl.program_build_info.LOG)).strip()
        except Exception:  # noqa: BLE001 - the log itself may be unavailable
            return ""

    def _load_binary(self, path: str) -> pyopencl.Program:
        cl = self.cl
        try:
            with open(path, "rb") as fh:
                blob = fh.read()
        except OSError as exc:
            raise FpgaBuildError(f"fpga.binary {path!r} cannot be read: {exc}") from exc
        kind = binary_kind(blob)
        what = BINARY_KINDS[kind]
        why = binary_mismatch(kind, self.platform.name)
        if why is not None:
            raise FpgaBuildError(
                f"fpga.binary {path!r} is {what}, but the selected OpenCL platform is "
                f"{self.platform.name.strip()!r} (device {self.device.name.strip()!r}): {why}; "
                "choose the matching platform with fpga: {platform: ...} or another binary")
        prog: pyopencl.Program | None = None
        try:
            prog = cl.Program(self.ctx, [self.device], [blob])
            prog.build(options=self.build_options or [])
        except cl.Error as exc:
            log = self._build_log(prog) if prog is not None else ""
            raise FpgaBuildError(
                f"fpga.binary {path!r} ({what}) was rejected by {self.describe()}: {exc}"
                + (f"\n--- build log ---\n{log}" if log else "")) from exc
        self.binary_kind = kind
        return prog

    @property
    def launch_as_task(self) -> bool:
        """One work-item per launch (clEnqueueTask): an .xclbin's compute unit (HLS or RTL)."""
        return self.binary_kind == "xclbin"

    def binary_kernels(self) -> set[str] | None:
        """The kernel names of the loaded prebuilt binary; None when kernels are built from source
        (any size, on first use)."""
        if self._binary_program is None:
            return None
        return set(str(self._binary_program.get_info(self.cl.program_info.KERNEL_NAMES))
                   .split(";"))

    def binary_sizes(self) -> list[int]:
        """Limb counts the loaded prebuilt binary carries (from its kernel names)."""
        if self._binary_program is None:
            return []
        names = str(self._binary_program.get_info(self.cl.program_info.KERNEL_NAMES)).split(";")
        return sorted(int(n.rsplit("_L", 1)[1]) for n in names if n.startswith("montmul_L"))

    def _program(self, limbs: int) -> pyopencl.Program:
        if self._binary_program is not None:
            return self._binary_program
        prog = self._programs.get(limbs)
        if prog is None:
            cl = self.cl
            opts = [f"-DL={limbs}"] + (self.build_options.split() if self.build_options else [])
            prog = cl.Program(self.ctx, kernel_source())
            try:
                prog.build(options=opts)
            except cl.Error as exc:
                raise FpgaBuildError(
                    f"building montmul.cl with {' '.join(opts)} failed on {self.describe()}:\n"
                    f"{exc}\n--- build log ---\n{self._build_log(prog)}") from exc
            self._programs[limbs] = prog
        return prog

    def kernel(self, name: str, limbs: int) -> pyopencl.Kernel:
        key = (name, limbs)
        k = self._kernels.get(key)
        if k is None:
            prog = self._program(limbs)
            full = f"{name}_L{limbs}"
            try:
                k = getattr(prog, full)
            except (AttributeError, self.cl.Error) as exc:
                have = self.binary_sizes()
                fix = (f"add L={limbs} to all_sizes.cl and rebuild it" if limbs not in have else
                       f"it carries other kernels of that size but not {name} (an RTL .xclbin "
                       "has mont_exp_L<n> only when modexp_kernel.v's .xo was linked into it, "
                       "docs/backends/fpga-xilinx.md; else use fpga mode montmul)")
                raise FpgaBuildError(
                    f"kernel {full} ({64 * limbs}-bit moduli) is not in fpga.binary "
                    f"{self.binary_path!r}, which carries limb counts {have}; {fix}") from exc
            self._kernels[key] = k
        return k

    # ---- constants of one modulus ------------------------------------------------------------
    def upload_constants(self, m_limbs: np.ndarray, r_mod_limbs: np.ndarray) -> pyopencl.Buffer:
        """[m, R mod m] as one read-only buffer: uploaded once per Montgomery context."""
        cl = self.cl
        host = np.ascontiguousarray(np.concatenate([m_limbs, r_mod_limbs]).astype(np.uint64))
        try:
            return cl.Buffer(self.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                             hostbuf=host)
        except cl.Error as exc:
            raise self.fault("clCreateBuffer (modulus constants)", exc) from exc

    def upload_rows(self, rows: list[np.ndarray], what: str) -> pyopencl.Buffer:
        """Rows of limbs as one read-only buffer (key constants, uploaded once per key)."""
        cl = self.cl
        host = np.ascontiguousarray(np.concatenate(rows).astype(np.uint64))
        try:
            return cl.Buffer(self.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                             hostbuf=host)
        except cl.Error as exc:
            raise self.fault(f"clCreateBuffer ({what})", exc) from exc

    def fault(self, call: str, exc: BaseException) -> FpgaDeviceError:
        """The typed error for OpenCL ``call`` failing with the driver's ``exc``."""
        return FpgaDeviceError(f"OpenCL {call} failed on {self.describe()}: "
                               f"{type(exc).__name__}: {exc}")

    # ---- launches ----------------------------------------------------------------------------
    def _buf(self, slot: _Slot, name: str, nbytes: int) -> pyopencl.Buffer:
        """Slot buffer ``name`` of at least ``nbytes`` (grown, never shrunk: reused as a ring)."""
        cur = slot.bufs.get(name)
        if cur is None or cur[1] < nbytes:
            cur = (self.cl.Buffer(self.ctx, self.cl.mem_flags.READ_WRITE, max(8, nbytes)),
                   max(8, nbytes))
            slot.bufs[name] = cur
        return cur[0]

    def _global(self, rows: int) -> tuple[tuple[int], tuple[int] | None]:
        if self.launch_as_task:
            # clEnqueueTask semantics: global = local = 1; the compute unit walks all rows itself
            return (1,), (1,)
        g = min(self.engines, rows)
        if self.local_size:
            ls = max(1, min(int(self.local_size), g))
            g = -(-g // ls) * ls
            return (g,), (ls,)
        return (g,), None

    def _fill_out(self, q: pyopencl.CommandQueue, buf: pyopencl.Buffer, nbytes: int) -> None:
        """All-ones rows in ``buf`` before a prebuilt binary's launch: a row the kernel does not
        write stays above every modulus (see :meth:`check_rows`)."""
        if self.binary_kind is not None:
            self.cl.enqueue_fill_buffer(q, buf, np.array([~np.uint64(0)], dtype=np.uint64), 0,
                                        nbytes)

    def check_rows(self, out: np.ndarray, m_limbs: np.ndarray | None, kernel: str) -> None:
        """Every row of a prebuilt binary's result below m, else :class:`FpgaDeviceError` naming
        the rows: an all-ones row is what the RTL kernels write after a memory error, and what
        the fill leaves where a write failed."""
        if self.binary_kind is None or m_limbs is None or out.shape[0] == 0:
            return
        bad = np.flatnonzero(~less_than(out, m_limbs))
        if bad.size:
            raise FpgaDeviceError(
                f"{kernel} on {self.describe()} returned {bad.size} of {out.shape[0]} rows at or "
                f"above the modulus (first: row {int(bad[0])}): the kernel reported a memory "
                "error (AXI RRESP/BRESP) or an exponent longer than it holds, or did not write "
                "them; an RTL kernel's status register says which")

    def mont_mul(self, consts: pyopencl.Buffer, n0: int, a: np.ndarray, b: np.ndarray,
                 m_limbs: np.ndarray | None = None) -> np.ndarray:
        """out = a·b·R^-1 mod m, chunked through the buffer ring (uploads overlap compute);
        ``m_limbs`` (m) lets an .xclbin's rows be checked (:meth:`check_rows`)."""
        with self._lock:
            out = self._mont_mul(consts, n0, a, b)
        self.check_rows(out, m_limbs, f"montmul_L{a.shape[1]}")
        return out

    def _mont_mul(self, consts: pyopencl.Buffer, n0: int, a: np.ndarray, b: np.ndarray
                  ) -> np.ndarray:
        cl = self.cl
        n, limbs = a.shape
        out = np.empty_like(a)
        knl = self.kernel("montmul", limbs)
        # a squaring (the bulk of a ModExp's MontMults) uploads its operand once
        square = b is a
        events: list[pyopencl.Event] = []
        # ``call`` names the OpenCL call in progress, for the error if the driver refuses it
        call = "clCreateBuffer"
        try:
            for k, s in enumerate(range(0, n, self.chunk)):
                e = min(n, s + self.chunk)
                rows = e - s
                slot = self.slots[k % len(self.slots)]
                nbytes = rows * limbs * 8
                call = "clCreateBuffer"
                da, do = self._buf(slot, "a", nbytes), self._buf(slot, "out", nbytes)
                q = slot.queue
                call = "clEnqueueWriteBuffer"
                cl.enqueue_copy(q, da, a[s:e], is_blocking=False)
                if square:
                    db = da
                else:
                    call = "clCreateBuffer"
                    db = self._buf(slot, "b", nbytes)
                    call = "clEnqueueWriteBuffer"
                    cl.enqueue_copy(q, db, b[s:e], is_blocking=False)
                gsz, lsz = self._global(rows)
                call = "clEnqueueFillBuffer"
                self._fill_out(q, do, nbytes)
                call = f"clEnqueueNDRangeKernel (montmul_L{limbs})"
                knl(q, gsz, lsz, da, db, do, consts, np.uint64(n0), np.uint32(rows))
                call = "clEnqueueReadBuffer"
                events.append(cl.enqueue_copy(q, out[s:e], do, is_blocking=False))
            call = "clWaitForEvents"
            cl.wait_for_events(events)
        except cl.Error as exc:
            raise self.fault(call, exc) from exc
        return out

    def mont_exp(self, consts: pyopencl.Buffer, n0: int, base: np.ndarray, exps: np.ndarray,
                 ebits: int, window: int, m_limbs: np.ndarray | None = None) -> np.ndarray:
        """out = x̄^e (Montgomery form) with the whole exponentiation on the device: one launch
        per chunk instead of ~1.2·ebits MontMult launches; ``m_limbs`` as in :meth:`mont_mul`."""
        with self._lock:
            out = self._mont_exp(consts, n0, base, exps, ebits, window)
        self.check_rows(out, m_limbs, f"mont_exp_L{base.shape[1]}")
        return out

    def _mont_exp(self, consts: pyopencl.Buffer, n0: int, base: np.ndarray, exps: np.ndarray,
                  ebits: int, window: int) -> np.ndarray:
        cl = self.cl
        n, limbs = base.shape
        le = exps.shape[1]
        shared = exps.shape[0] == 1
        out = np.empty_like(base)
        knl = self.kernel("mont_exp", limbs)
        events: list[pyopencl.Event] = []
        call = "clCreateBuffer"
        try:
            for k, s in enumerate(range(0, n, self.chunk)):
                e = min(n, s + self.chunk)
                rows = e - s
                slot = self.slots[k % len(self.slots)]
                gsz, lsz = self._global(rows)
                ex = exps if shared else exps[s:e]
                call = "clCreateBuffer"
                dx = self._buf(slot, "a", rows * limbs * 8)
                do = self._buf(slot, "out", rows * limbs * 8)
                de = self._buf(slot, "exp", ex.size * 8)
                scratch = self._buf(slot, "table", gsz[0] * (1 << window) * limbs * 8)
                q = slot.queue
                call = "clEnqueueWriteBuffer"
                cl.enqueue_copy(q, dx, base[s:e], is_blocking=False)
                cl.enqueue_copy(q, de, np.ascontiguousarray(ex), is_blocking=False)
                call = "clEnqueueFillBuffer"
                self._fill_out(q, do, rows * limbs * 8)
                call = f"clEnqueueNDRangeKernel (mont_exp_L{limbs})"
                knl(q, gsz, lsz, dx, de, do, scratch, consts, np.uint64(n0), np.uint32(rows),
                    np.uint32(le), np.uint32(0 if shared else le), np.uint32(ebits),
                    np.uint32(window))
                call = "clEnqueueReadBuffer"
                events.append(cl.enqueue_copy(q, out[s:e], do, is_blocking=False))
            call = "clWaitForEvents"
            cl.wait_for_events(events)
        except cl.Error as exc:
            raise self.fault(call, exc) from exc
        return out


    def paillier_enc(self, consts: pyopencl.Buffer, n0: int, msg: np.ndarray, rnd: np.ndarray,
                     nexp: np.ndarray, ebits: int, window: int, limbs: int,
                     m_limbs: np.ndarray | None = None) -> np.ndarray:
        """(1 + m·n)·r^n·R mod n², Montgomery form, the whole encryption on the device
        (``paillier_enc_L<limbs>``): the rows of m and r (n-sized) go in, the ciphertexts come
        back; ``consts`` = [n², R, R², n·R mod n²]."""
        with self._lock:
            out = self._paillier_enc(consts, n0, msg, rnd, nexp, ebits, window, limbs)
        self.check_rows(out, m_limbs, f"paillier_enc_L{limbs}")
        return out

    def _paillier_enc(self, consts: pyopencl.Buffer, n0: int, msg: np.ndarray, rnd: np.ndarray,
                      nexp: np.ndarray, ebits: int, window: int, limbs: int) -> np.ndarray:
        cl = self.cl
        n, le = msg.shape
        out = np.empty((n, limbs), dtype=np.uint64)
        knl = self.kernel("paillier_enc", limbs)
        events: list[pyopencl.Event] = []
        call = "clCreateBuffer"
        try:
            for k, s in enumerate(range(0, n, self.chunk)):
                e = min(n, s + self.chunk)
                rows = e - s
                slot = self.slots[k % len(self.slots)]
                gsz, lsz = self._global(rows)
                call = "clCreateBuffer"
                dm = self._buf(slot, "a", rows * le * 8)
                dr = self._buf(slot, "b", rows * le * 8)
                do = self._buf(slot, "out", rows * limbs * 8)
                de = self._buf(slot, "exp", nexp.size * 8)
                scratch = self._buf(slot, "table", gsz[0] * (1 << window) * limbs * 8)
                q = slot.queue
                call = "clEnqueueWriteBuffer"
                cl.enqueue_copy(q, dm, np.ascontiguousarray(msg[s:e]), is_blocking=False)
                cl.enqueue_copy(q, dr, np.ascontiguousarray(rnd[s:e]), is_blocking=False)
                cl.enqueue_copy(q, de, np.ascontiguousarray(nexp), is_blocking=False)
                call = "clEnqueueFillBuffer"
                self._fill_out(q, do, rows * limbs * 8)
                call = f"clEnqueueNDRangeKernel (paillier_enc_L{limbs})"
                knl(q, gsz, lsz, dm, dr, de, do, scratch, consts, np.uint64(n0),
                    np.uint32(rows), np.uint32(le), np.uint32(ebits), np.uint32(window))
                call = "clEnqueueReadBuffer"
                events.append(cl.enqueue_copy(q, out[s:e], do, is_blocking=False))
            call = "clWaitForEvents"
            cl.wait_for_events(events)
        except cl.Error as exc:
            raise self.fault(call, exc) from exc
        return out


def compile_binary(out_path: str, platform: str | None = None, device: str | None = None,
                   build_options: str = "") -> list[str]:
    """Build ``all_sizes.cl`` on the selected device and write its program binary to ``out_path``.

    On an FPGA the binary comes from the vendor's offline compiler instead (aoc / v++); this helper
    produces the same kind of artefact for any OpenCL device (PoCL here), so the prebuilt-binary path
    is exercised end to end.  Returns the kernel names the binary carries.
    """
    cl = import_cl()
    _, dev = select_device(platform, device)
    ctx = cl.Context([dev])
    with open(os.path.join(kernel_dir(), "all_sizes.cl"), encoding="utf-8") as fh:
        src = fh.read()
    prog = cl.Program(ctx, src)
    opts = [f"-I{kernel_dir()}"] + (build_options.split() if build_options else [])
    try:
        prog.build(options=opts)
    except cl.Error as exc:
        raise FpgaBuildError(f"building all_sizes.cl failed: {exc}") from exc
    blob = prog.get_info(cl.program_info.BINARIES)[0]
    with open(out_path, "wb") as fh:
        fh.write(blob)
    return str(prog.get_info(cl.program_info.KERNEL_NAMES)).split(";")
