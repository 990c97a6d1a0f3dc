"""GPU proxies: static figures of the ``gpu`` backend's CUDA kernels, measured without a GPU.

    python -m tools.gpu.proxies [--cubin PATH [--ptxas-log PATH]] [--out-dir DIR] [--json PATH]
                                [--kernel REGEX] [--loops] [--no-sass]
                                [--block-size N] [--dyn-smem [REGEX=]BYTES ...]
                                [--check [--check-pattern REGEX] [--max-stack BYTES]]
                                [--montmult REGEX --bits B --span REF=TRIPS[:own]... --lanes TPI
                                 [--min-share F]]

It compiles the kernels (``unifl/backends/gpu/src/kernels.cu``) for sm_90 only (H100/H200) into a
cubin, or reuses one (``--cubin``), and reports per kernel (modules of ``tools.gpu``):

* **ptxas figures** (:mod:`.ptxas`): registers per thread, stack frame, spill bytes, static shared
  memory, barriers; ``cuobjdump -res-usage`` adds the constant bank 0 size and cross-checks
  registers and stack.  A stack frame is *local memory*, not registers: a big frame is not a spill,
  but every access to it is an LDL/STL.  Spills are only known from the ptxas log; with
  ``--cubin`` it is read from ``--ptxas-log`` or ``<cubin>.ptxas.txt`` (``--out-dir`` writes it).
* **theoretical occupancy on one H100 SM** (:mod:`.occupancy`) from the registers, the block size
  the runtime launches with and the dynamic shared memory per block (``--dyn-smem``).
* **SASS instruction classes** (:mod:`.sass`) and the **loops** of each kernel
  (:mod:`.controlflow`).
* **the MontMult model** (:mod:`.montmult`, ``--montmult``): IMAD slots per MontMult against 4n², and
  the share of the 32×32→64 product instructions (IMAD.WIDE, IMAD.HI) in the kernel (static), in
  the code a converged warp runs, per trip of the main loop, and in one executed MontMult (the
  spans times their trips, the rest once); ``--min-share`` fails the run when the last two are
  below it.

Every figure is a *static* count from the compiler's output, never a timing.

``--check`` turns the figures into a gate: it fails when a kernel matching ``--check-pattern``
(default: the cooperative kernels, demangled names containing ``_g<``) spills or has a stack frame
over ``--max-stack`` bytes (2048), and it fails, saying so, when no kernel matches at all.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import ProxyError
from .montmult import imad_slots_per_montmult, parse_span, product_shares
from .report import build_report, check, format_loops, format_resources, format_sass, to_json
from .toolchain import compile_cubin, reuse_cubin


def parse_dyn_smem(values: Sequence[str]) -> tuple[int, dict[str, int]]:
    """The CLI's ``--dyn-smem`` values: (bytes for every kernel, {regex: bytes})."""
    every = 0
    by: dict[str, int] = {}
    for v in values:
        pattern, sep, num = v.rpartition("=")
        try:
            n = int(num)
        except ValueError:
            raise ProxyError(f"--dyn-smem {v!r}: expected BYTES or REGEX=BYTES") from None
        if n < 0:
            raise ProxyError(f"--dyn-smem {v!r}: bytes must be >= 0")
        if sep:
            by[pattern] = n
        else:
            every = n
    return every, by


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI (see the module doc); 0 ok, 1 the check failed, 2 an error."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cubin", type=Path, help="reuse this cubin instead of compiling")
    ap.add_argument("--ptxas-log", type=Path, help="ptxas -v log of --cubin (default: "
                    "<cubin>.ptxas.txt when present)")
    ap.add_argument("--out-dir", type=Path, help="keep the compiled cubin and its ptxas log here")
    ap.add_argument("--json", type=Path, help="write the full report as JSON here")
    ap.add_argument("--kernel", help="only kernels whose short or demangled name matches (regex)")
    ap.add_argument("--block-size", type=int, help="threads per block for every kernel (default: "
                    "the runtime's, BLOCK_SIZE_TABLE)")
    ap.add_argument("--dyn-smem", action="append", default=[], metavar="[REGEX=]BYTES",
                    help="dynamic shared memory per block: BYTES for every kernel (default 0), or "
                         "REGEX=BYTES for the kernels whose short name matches (repeatable, first "
                         "match wins)")
    ap.add_argument("--no-sass", action="store_true", help="skip the disassembly")
    ap.add_argument("--loops", action="store_true", help="list the innermost multiply loops "
                    "(default: only with --kernel)")
    ap.add_argument("--check", action="store_true", help="fail when a kernel matching "
                    "--check-pattern spills or has a stack frame over --max-stack")
    ap.add_argument("--check-pattern", default=r"_g<", help="regex (default: '_g<')")
    ap.add_argument("--max-stack", type=int, default=2048, help="bytes (default 2048)")
    ap.add_argument("--montmult", metavar="KERNEL", help="IMAD slots per MontMult of this kernel "
                    "(regex matching one kernel), with --bits, --span and --lanes")
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--span", action="append", default=[], metavar="REF=TRIPS[:own]",
                    help="code counted per MontMult: a loop (#i, 0xHEAD, 0xA-0xB) or an address "
                         "range, with its trips per lane")
    ap.add_argument("--lanes", type=int, default=1, help="threads sharing one MontMult (TPI)")
    ap.add_argument("--min-share", type=float, metavar="F", help="fail when the product "
                    "instructions' share of one MontMult of the --montmult kernel (executed: the "
                    "spans x trips, the rest once) or of one trip of its main loop is below F")
    args = ap.parse_args(argv)
    try:
        if args.cubin is not None:
            compiled = reuse_cubin(args.cubin, args.ptxas_log)
        else:
            compiled = compile_cubin(args.out_dir)
        sizes = {".": args.block_size} if args.block_size else None
        dyn_all, dyn_by = parse_dyn_smem(args.dyn_smem)
        report = build_report(compiled, args.kernel, dyn_all, sizes, not args.no_sass,
                              dyn_smem_by=dyn_by)
        for w in report.warnings:
            print(f"warning: {w}", file=sys.stderr)
        how = (f"compiled in {report.compile_seconds:.1f} s ({report.nvcc_version})"
               if report.compile_seconds is not None else "reused")
        print(f"gpu proxies: {report.cubin} (sm_{report.arch}, {how}); occupancy for "
              f"{report.limits.name}; static counts, not timings")
        if not report.kernels:
            print(f"no kernel matches --kernel {args.kernel!r}")
        else:
            print(format_resources(report))
            if not args.no_sass:
                print()
                print(format_sass(report))
                if args.loops or args.kernel:
                    print()
                    print(format_loops(report))
        data = to_json(report)
        if args.montmult:
            k = report.kernel(args.montmult)
            if not args.span:
                raise ProxyError("--montmult needs at least one --span REF=TRIPS")
            mm = imad_slots_per_montmult(k, args.bits, [parse_span(k, s) for s in args.span],
                                         args.lanes)
            data["montmult"] = mm
            print()
            for row in mm["spans"]:
                print(f"  {row['note'] or row['span']}: {row['slots_per_trip']} slots/trip x "
                      f"{row['trips']:g} = {row['slots']:,.0f}")
            print(f"{k.name}: {mm['imad_slots_per_montmult']:,.0f} IMAD slots per {args.bits}-bit "
                  f"MontMult (x{mm['lanes']} lanes) = {mm['ratio']:.3f} x 4n^2 "
                  f"({mm['model_4n2']:,})")
            sh = product_shares(k, spans=[parse_span(k, s) for s in args.span])
            data["product_share"] = sh
            for part, what in (("function", "the function"),
                               ("converged", "its converged-warp code"),
                               ("loop", f"one trip of loop {sh.get('loop', {}).get('label', '')}"),
                               ("executed", f"one {args.bits}-bit MontMult (the spans x trips, "
                                            f"the rest once)")):
                if part in sh:
                    p = sh[part]
                    print(f"{k.name}: IMAD.WIDE/IMAD.HI (32x32->64 products) {p['products']:,} of "
                          f"{p['instructions']:,} SASS instructions of {what} = "
                          f"{100 * p['share']:.1f} %")
        rc = 0
        if args.min_share is not None:
            if not args.montmult:
                raise ProxyError("--min-share needs --montmult")
            for part in ("executed", "loop"):
                got = data["product_share"][part]["share"]
                if got < args.min_share:
                    print(f"CHECK FAILED: {args.montmult}: product share ({part}) {100 * got:.1f} %"
                          f" < {100 * args.min_share:.1f} %")
                    rc = 1
        if args.check:
            fails = check(report, args.check_pattern, args.max_stack)
            data["check"] = {"pattern": args.check_pattern, "max_stack": args.max_stack,
                             "failures": fails}
            print()
            for f in fails:
                print(f"CHECK FAILED: {f}")
            if not fails:
                print(f"check passed: kernels matching {args.check_pattern!r} have no spills and "
                      f"stack frames <= {args.max_stack} B")
            rc = 1 if fails else rc
        if args.json:
            args.json.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
        return rc
    except (ProxyError, ValueError) as exc:
        print(f"tools.gpu.proxies: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
