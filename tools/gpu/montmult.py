"""The multiply work of one Montgomery multiplication against the 4n² model: IMAD slots per
MontMult from a kernel's loops and their trip counts, and the share of the 32×32→64 product
instructions (IMAD.WIDE, IMAD.HI) among the instructions of a kernel, of the code a converged warp
runs, and of one loop trip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .controlflow import Loop, converged_code, multiply_loops
from .errors import ProxyError
from .report import KernelProxies
from .sass import count_classes


def montmult_model(bits: int) -> dict[str, int]:
    """The multiply work of one ``bits``-bit Montgomery multiplication in 32-bit words.

    n = bits / 32 words; CIOS does n^2 word products for a*b and n^2 for q*m, each 32x32 -> 64,
    which costs 2 IMAD issue slots on sm_90 (IMAD.WIDE.U32: the IMAD pipe takes two passes for the
    64-bit result) -> 4n^2 slots.  With 64-bit limbs (L = n/2) the same work is 2L^2 products of
    64x64 -> 128 bits, each 4 32-bit products = 8 slots: 16L^2 = 4n^2.  The q = t0*n0inv terms
    (n of them, the low half only) are left out of the model.
    """
    if bits <= 0 or bits % 32:
        raise ValueError(f"bits must be a positive multiple of 32, not {bits}")
    n = bits // 32
    return {"bits": bits, "n": n, "word_products": 2 * n * n, "imad_slots": 4 * n * n}


@dataclass(frozen=True)
class Span:
    """Code counted in :func:`imad_slots_per_montmult`: address ranges (first, last instruction
    address, inclusive) of one kernel and how many times they run per MontMult *per lane*;
    ``note``: what the code is."""

    ranges: tuple[tuple[int, int], ...]
    trips: float
    note: str = ""

    @property
    def label(self) -> str:
        return ",".join(f"{a:#06x}-{b:#06x}" for a, b in self.ranges)


def loop_span(loop: Loop, trips: float, note: str = "", own: bool = False) -> Span:
    """A :class:`Span` covering a loop's body (only the code outside its nested loops if
    ``own``)."""
    return Span(tuple(loop.own_ranges if own else loop.ranges), trips,
                note or (f"{loop.label} own" if own else loop.label))


def select_loops(kernel: KernelProxies, refs: Sequence[str]) -> list[Loop]:
    """Loops of a kernel by reference: ``"#i"`` -- the i-th innermost multiply loop
    (:func:`multiply_loops`, in address order); ``"0x1ed0"`` -- the loop with that header;
    ``"0x1ed0-0x2530"`` -- the loop with that label (lowest-highest address)."""
    if not kernel.instrs:
        raise ProxyError(f"{kernel.name}: no SASS, so no loops (the report was built without it)")
    mloops = multiply_loops(kernel.loops)
    out: list[Loop] = []
    for ref in refs:
        if ref.startswith("#"):
            try:
                i = int(ref[1:])
            except ValueError:
                raise ProxyError(f"bad loop reference {ref!r}") from None
            if not 0 <= i < len(mloops):
                raise ProxyError(f"{kernel.name}: no multiply loop {ref} ({len(mloops)} of them)")
            out.append(mloops[i])
            continue
        try:
            start, _, end = ref.partition("-")
            hits = [lp for lp in kernel.loops
                    if (lp.header == int(start, 16) if not end else
                        (lp.start, lp.end) == (int(start, 16), int(end, 16)))]
        except ValueError:
            raise ProxyError(f"bad loop reference {ref!r}") from None
        if len(hits) != 1:
            raise ProxyError(f"{kernel.name}: no loop {ref!r}; loops: "
                             + ", ".join(lp.label for lp in kernel.loops))
        out.append(hits[0])
    return out


def imad_slots_per_montmult(kernel: KernelProxies, bits: int, spans: Sequence[Span],
                            lanes: int = 1) -> dict[str, Any]:
    """IMAD slots one MontMult issues, from static per-trip counts and the caller's trip counts:
    Σ over ``spans`` of (multiply-class IMAD slots in the span) x trips, times ``lanes`` (the
    threads that share one MontMult: 1 for the thread-per-instance kernels, TPI for the
    cooperative ones, whose span trips are per lane), and its ratio to 4n^2
    (:func:`montmult_model`).

    The trip counts are the caller's knowledge of the source (how many times the loop over words
    runs for a given size, the unroll factor ptxas chose -- the loop's counts show it), not
    something read from the binary.  Static counts assume every instruction in a span runs on each
    trip; predicated-off or skipped code inside a span is still counted.

    Accounting of the thread kernel ``k_mul<32>`` (2048-bit modulus, n = 64, L = 32 limbs of 64
    bits; nvcc 13.0.88 for sm_90): each inlined ``mont_mul`` is an outer loop over i (L trips) with
    two inner loops, ``t[j] = mac(t[j], a_i, b[j], c)`` for j = 0..L-1 and
    ``t[j-1] = mac(t[j], q, m[j], c)`` for j = 1..L-1, each unrolled 4x by the compiler (the loop's
    ``imad_wide_x`` count, one per mac, shows the factor), the remainders as straight-line code.

    * One ``mac`` in the loops (64x64 -> 128 plus two carries) is 5 IMAD.WIDE.U32 (the last one
      ``.X``) + 2 plain IMAD = **12 slots**: ``x*y`` (mul.lo.u64) becomes IMAD.WIDE.U32 lo*lo + 2
      IMAD for the low halves of the cross terms (4 slots) and ``__umul64hi`` (mul.hi.u64) 4
      IMAD.WIDE.U32 (8 slots) that compute lo*lo and the cross terms again: ptxas does not share
      the partial products of the two, so a mac costs 12 slots where the model counts 8 (4 products
      of 32x32 -> 64).
    * Per trip of an inner loop: 4 macs = 48 slots.  Trips per MontMult: (L/4)·L = 256 for the
      first loop, floor((L-1)/4)·L = 224 for the second; its 3 other macs per i are remainder code
      (36 slots, L trips), the first loop's remainder code runs 0 times (L % 4 = 0).
    * Per i also q = t0·n0inv (mul.lo.u64: 4 slots) and the q·m[0] mac whose low half is not
      stored (here ptxas does share the partial products: 4 IMAD.WIDE.U32 = 8 slots).

    Total: 256·48 + 224·48 + 32·36 + 32·12 = 24,576 slots = **1.50 x 4n^2** (16,384); the inner
    loops alone are 23,040 = 1.41 x.  That is 2L^2 = 2,048 macs at 12 slots -- 1.5x the model,
    all of it the mul.lo / mul.hi duplication; the q terms happen to cost exactly one mac's worth.
    On the CLI: ``--montmult '^k_mul<32>$' --span '#2=256' --span '#3=224' --span
    0x33f0-0x3990=32 --span 0x2aa0-0x2c70=32`` (the addresses of the remainder and q code are
    those of that compile; ``--loops`` lists the loops).

    The cooperative kernels, as first compiled in this session (``k_mul_g<32>``: TPI = 8 lanes,
    LPT = 8 32-bit words per lane): the loop over source words runs n32 / LPT = 8 trips per lane,
    and one trip (the k-steps unrolled) is 8 x (8 + 8 IMAD.WIDE.U32 for a_i·b and q·m, + 1 IMAD
    for q) = 264 slots; ``--span '#0=8' --lanes 8`` gives 264·8·8 = 16,896 = 1.03 x 4n^2, the
    excess being q = t0·m0inv, which every lane computes (TPI·n32 = 512 slots).
    """
    model = montmult_model(bits)
    if not kernel.instrs:
        raise ProxyError(f"{kernel.name}: no SASS to count (the report was built without it)")
    if lanes < 1:
        raise ValueError("lanes must be >= 1")
    rows: list[dict[str, Any]] = []
    total = 0.0
    for sp in spans:
        body = [i for i in kernel.instrs if any(a <= i.addr <= b for a, b in sp.ranges)]
        if not body:
            raise ProxyError(f"{kernel.name}: no instructions in {sp.label}")
        counts = count_classes(body)
        slots = counts["imad_slots"] * sp.trips
        total += slots
        rows.append({"span": sp.label, "note": sp.note, "trips": sp.trips,
                     "slots_per_trip": counts["imad_slots"], "imad_wide": counts["imad_wide"],
                     "imad_lo": counts["imad_lo"], "imad_hi": counts["imad_hi"],
                     "imad_x": counts["imad_x"], "slots": slots})
    total *= lanes
    return {"kernel": kernel.name, "bits": bits, "n": model["n"], "lanes": lanes, "spans": rows,
            "imad_slots_per_montmult": total, "model_4n2": model["imad_slots"],
            "ratio": total / model["imad_slots"]}


def parse_span(kernel: KernelProxies, text: str) -> Span:
    """``REF=TRIPS[:own]`` (the CLI's ``--span``): REF a loop reference of :func:`select_loops`
    (``#0``, ``0x1ed0``, ``0x1ed0-0x2530``; ``:own``: its code outside nested loops) or, when no
    loop has that label, the address range ``0xA-0xB`` as it stands."""
    ref, sep, rest = text.partition("=")
    if not sep:
        raise ProxyError(f"--span {text!r}: expected REF=TRIPS[:own]")
    trips_s, _, flag = rest.partition(":")
    if flag not in ("", "own"):
        raise ProxyError(f"--span {text!r}: unknown flag {flag!r} (only ':own')")
    try:
        trips = float(trips_s)
    except ValueError:
        raise ProxyError(f"--span {text!r}: trips {trips_s!r} is not a number") from None
    try:
        (lp,) = select_loops(kernel, [ref])
        return loop_span(lp, trips, own=flag == "own")
    except ProxyError:
        start, dash, end = ref.partition("-")
        if ref.startswith("#") or not dash or flag:
            raise
        try:
            return Span(((int(start, 16), int(end, 16)),), trips, ref)
        except ValueError:
            raise ProxyError(f"--span {text!r}: bad address range") from None


def _share(counts: dict[str, int]) -> dict[str, float | int]:
    products = counts["imad_wide"] + counts["imad_hi"]
    return {"instructions": counts["total"], "products": products,
            "address_products": counts["imad_mul_imm"],
            "share": products / counts["total"] if counts["total"] else 0.0}


def product_shares(kernel: KernelProxies, main_loop: Loop | None = None,
                   spans: Sequence[Span] = ()) -> dict[str, Any]:
    """The share of the 32×32→64 product instructions (IMAD.WIDE*, IMAD.HI*) among a kernel's SASS
    instructions, four ways:

    * ``function``: every instruction of the function, once (static);
    * ``converged``: the code a converged warp runs, once (without the diverged-warp fallbacks and
      the padding after the last EXIT, :func:`.controlflow.converged_code`);
    * ``loop``: one trip of ``main_loop`` (default: the kernel's first multiply loop);
    * ``executed`` (with ``spans``): what one run of the kernel issues per lane -- each span times
      its trips, every other instruction of the converged code once (a loop that does not run
      for the size in question is a span of 0 trips).

    ``address_products`` counts the products with an immediate factor (address arithmetic), which
    are in ``products`` too."""
    if not kernel.instrs:
        raise ProxyError(f"{kernel.name}: no SASS to count (the report was built without it)")
    loops = multiply_loops(kernel.loops)
    loop = main_loop if main_loop is not None else (loops[0] if loops else None)
    hot = converged_code(kernel.instrs)
    out: dict[str, Any] = {"kernel": kernel.name,
                           "function": _share(count_classes(kernel.instrs)),
                           "converged": _share(count_classes(hot))}
    if loop is not None:
        body = [i for i in kernel.instrs if any(a <= i.addr <= b for a, b in loop.ranges)]
        out["loop"] = _share(count_classes(body)) | {"label": loop.label}
    if spans:
        def inside(i: Any, sp: Span) -> bool:
            return any(a <= i.addr <= b for a, b in sp.ranges)
        total = count_classes(i for i in hot if not any(inside(i, sp) for sp in spans))
        for sp in spans:
            c = count_classes(i for i in kernel.instrs if inside(i, sp))
            for key in total:
                total[key] += int(round(c[key] * sp.trips))
        out["executed"] = _share(total) | {"spans": [sp.label for sp in spans],
                                           "trips": [sp.trips for sp in spans]}
    return out
