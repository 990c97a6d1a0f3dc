"""SASS as data: ``cuobjdump -sass`` parsed into instructions, and the instruction classes the
proxies count (the IMAD family split into real multiplies and IMADs used as moves, shifts and adds;
shuffles, votes, the memory spaces, carry-chain adds).  Static counts, never timings."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import ParseError


@dataclass(frozen=True)
class Instr:
    """One SASS instruction: byte address in its function, guard predicate (``@P0``, ``@!P1``),
    full opcode with modifiers (``IMAD.WIDE.U32``), operands, and the target address of a ``BRA``
    or ``CALL.REL`` with an immediate target (None otherwise)."""

    addr: int
    pred: str | None
    opcode: str
    operands: tuple[str, ...]
    target: int | None = None

    @property
    def base(self) -> str:
        """The mnemonic without modifiers: ``IMAD.WIDE.U32`` -> ``IMAD``."""
        return self.opcode.split(".", 1)[0]


@dataclass
class SassFunction:
    mangled: str
    instrs: list[Instr]


_S_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_S_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;\s*(?:/\*.*\*/)?\s*$")
_S_ENCODING = re.compile(r"^\s*/\*\s*0x[0-9a-fA-F]+\s*\*/\s*$")
_S_PRED = re.compile(r"^(@!?U?P(?:T|\d+))\s+(.*)$")
_S_SKIP = re.compile(r"^\s*(?:$|code for sm_\w+|\.target\s|\.headerflags\s|Fatbin |=+$|arch = |"
                     r"code version = |host = |compile_size = |\.+$|\.section\s|\.elftype\s)")


def _split_operands(text: str) -> tuple[str, ...]:
    """Operands split at top-level commas (sm_90's ``[..]`` memory and constant operands hold no
    comma, so only text with braces or parentheses needs the bracket-aware split)."""
    if not text:
        return ()
    if "{" not in text and "(" not in text:
        return tuple(p.strip() for p in text.split(","))
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return tuple(out)


def parse_instr(addr: int, text: str) -> Instr:
    """One instruction's text (``@!P0 BRA 0x1cb0``) at ``addr``."""
    pred = None
    if m := _S_PRED.match(text):
        pred, text = m.group(1), m.group(2)
    opcode, _, rest = text.partition(" ")
    ops = _split_operands(rest.strip())
    target = None
    if opcode.split(".", 1)[0] in ("BRA", "CALL") and ops:
        tm = re.fullmatch(r"(?:`\()?(0x[0-9a-fA-F]+)\)?", ops[-1])
        if tm:
            target = int(tm.group(1), 16)
    return Instr(addr, pred, opcode, ops, target)


def parse_sass(text: str) -> tuple[dict[str, SassFunction], list[str]]:
    """``cuobjdump -sass`` output: {mangled: function} and the lines not understood.  The second
    16-hex-digit half of each instruction's encoding (a comment-only line) and the section headers
    are skipped; an instruction line before any ``Function :`` header is a :class:`ParseError`."""
    funcs: dict[str, SassFunction] = {}
    unparsed: list[str] = []
    cur: SassFunction | None = None
    for line in text.splitlines():
        if _S_ENCODING.match(line) or _S_SKIP.match(line):
            continue
        if m := _S_FUNC.match(line):
            cur = funcs.setdefault(m.group(1), SassFunction(m.group(1), []))
        elif m := _S_INSTR.match(line):
            if cur is None:
                raise ParseError(f"SASS instruction outside any function: {line!r}")
            cur.instrs.append(parse_instr(int(m.group(1), 16), m.group(2)))
        else:
            unparsed.append(line)
    return funcs, unparsed


# --------------------------------------------------------------------------- instruction classes
#: the classes counted besides the IMAD family: the memory spaces (LDL/STL local = stack frame and
#: spills; LDS/STS shared; LDG/STG global), warp collectives (SHFL, VOTE), and the adds of carry
#: chains (IADD3) and uniform-datapath multiplies (UIMAD, one per warp, not per thread)
COUNTED_BASES = ("SHFL", "VOTE", "LDL", "STL", "LDS", "STS", "LDG", "STG", "IADD3", "UIMAD",
                 "BAR", "CALL")
_IMM = re.compile(r"^-?(?:0x[0-9a-fA-F]+|\d+)$")
_PRED_OPERAND = re.compile(r"^!?U?P(?:T|\d+)$")


def _bare(op: str) -> str:
    """A source operand without negation/abs marks and modifiers (``-R4.reuse`` -> ``R4``)."""
    op = op.lstrip("-~|!").rstrip("|")
    return op.split(".", 1)[0] if op.startswith(("R", "UR")) else op


def imad_kind(ins: Instr) -> str | None:
    """The class of an IMAD-family instruction (None for any other):

    * ``mov`` / ``shl`` / ``iadd``: IMAD.MOV*, IMAD.SHL*, IMAD.IADD* -- ptxas issues moves, shifts
      and adds on the IMAD pipe; no multiply;
    * ``nonmul``: another IMAD whose multiplicand is RZ or 1 (a move or add in disguise);
    * ``wide`` (IMAD.WIDE, IMAD.WIDE.U32: 32x32 -> 64, **2 slots**), ``hi`` (IMAD.HI*: the high
      half, 1 slot), ``x`` (IMAD.X: with carry-in, 1 slot), ``lo`` (plain IMAD / IMAD.U32: the low
      32 bits, 1 slot) -- the *multiply class*.
    """
    if ins.base != "IMAD":
        return None
    mods = ins.opcode.split(".")[1:]
    if "MOV" in mods:
        return "mov"
    if "SHL" in mods:
        return "shl"
    if "IADD" in mods:
        return "iadd"
    srcs = [o for o in ins.operands[1:] if not _PRED_OPERAND.match(o)]
    if len(srcs) >= 2:
        a, b = _bare(srcs[0]), _bare(srcs[1])
        if a in ("RZ", "URZ") or b in ("RZ", "URZ") or a in ("0x1", "1") or b in ("0x1", "1"):
            return "nonmul"
    if "WIDE" in mods:
        return "wide"
    if "HI" in mods:
        return "hi"
    if "X" in mods:
        return "x"
    return "lo"


#: IMAD issue slots per multiply-class instruction: a 32x32->64 product (IMAD.WIDE*) takes 2
IMAD_SLOTS = {"wide": 2, "hi": 1, "x": 1, "lo": 1}


def multiplies_immediate(ins: Instr) -> bool:
    """A multiply-class IMAD with an immediate multiplicand (address scaling such as ``i*8``)."""
    srcs = [o for o in ins.operands[1:] if not _PRED_OPERAND.match(o)]
    return len(srcs) >= 2 and bool(_IMM.match(srcs[1]) or _IMM.match(srcs[0]))


CLASS_KEYS = ("total", "imad", "imad_mul", "imad_slots", "imad_wide", "imad_hi", "imad_x",
              "imad_lo", "imad_wide_x", "imad_mul_imm", "imad_mov", "imad_shl", "imad_iadd",
              "imad_nonmul", *COUNTED_BASES)


def classify(ins: Instr) -> dict[str, int]:
    """What one instruction adds to each class of :func:`count_classes`."""
    c = {"total": 1}
    kind = imad_kind(ins)
    if kind is not None:
        c["imad"] = 1
        c[f"imad_{kind}"] = 1
        if kind == "wide" and "X" in ins.opcode.split(".")[1:]:
            c["imad_wide_x"] = 1
        if kind in IMAD_SLOTS:
            c["imad_mul"] = 1
            c["imad_slots"] = IMAD_SLOTS[kind]
            if multiplies_immediate(ins):
                c["imad_mul_imm"] = 1
    elif ins.base in COUNTED_BASES:
        c[ins.base] = 1
    return c


def count_classes(instrs: Iterable[Instr]) -> dict[str, int]:
    """Static instruction counts of a span of SASS.

    ``total``: every instruction (NOPs included); ``imad``: the IMAD family;
    ``imad_mov/shl/iadd/nonmul``: IMADs doing no multiply (see :func:`imad_kind`);
    ``imad_wide/hi/x/lo``: the multiply class by kind, ``imad_mul`` their sum, ``imad_mul_imm`` the
    part with an immediate multiplicand (address arithmetic, not bignum words), ``imad_wide_x``:
    IMAD.WIDE*.X, the carry-in product that ends each 64x64 high half (``__umul64hi``) in nvcc
    13.0's lowering -- one per 64-bit word product, so a count of them; ``imad_slots``:
    2 per IMAD.WIDE* + 1 per other multiply; then one count per :data:`COUNTED_BASES` mnemonic
    (``LDL``, ``STL``, ...; ``LDG`` covers LDG.E.64 etc.).
    """
    c: Counter[str] = Counter()
    for ins in instrs:
        c.update(classify(ins))
    return {k: c.get(k, 0) for k in CLASS_KEYS}


class _Prefix:
    """Prefix sums of the class counts over a function's instructions: the counts of any range of
    positions in O(classes)."""

    def __init__(self, instrs: Sequence[Instr]) -> None:
        cls = [classify(ins) for ins in instrs]
        self.sums: dict[str, list[int]] = {
            k: list(itertools.accumulate((c.get(k, 0) for c in cls), initial=0))
            for k in CLASS_KEYS}

    def counts(self, ranges: Iterable[tuple[int, int]]) -> dict[str, int]:
        """Counts over the union of disjoint position ranges [i, j)."""
        rs = list(ranges)
        return {k: sum(arr[j] - arr[i] for i, j in rs) for k, arr in self.sums.items()}
