"""Control flow of a SASS function: basic blocks, dominators, the natural loops (back edges to a
block that dominates them) and the innermost loops that hold multiplies, and the code a converged
warp runs (everything reachable without the ``BRA.DIV`` fallbacks ptxas adds for diverged warps)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .sass import Instr, _Prefix


#: instructions that end a basic block without falling through when unguarded
_STOPS = ("EXIT", "RET", "KILL", "BRX", "JMX")


def _is_conditional(ins: Instr) -> bool:
    """A branch that may fall through: guarded by a predicate other than PT, or testing a uniform
    predicate / divergence operand (``BRA.U !UP0, X``, ``BRA.DIV UR4, X``)."""
    return (ins.pred not in (None, "@PT")) or len(ins.operands) > 1 or "DIV" in ins.opcode


def control_flow(instrs: Sequence[Instr], follow_div: bool = False
                 ) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Basic blocks of a function -- (first, past-last) instruction positions -- and the successor
    block indices of each.  ``BRA`` targets and the fall-through of conditional branches make the
    edges; an unguarded EXIT/RET/BRX ends a path (BRX's targets are not known from the text; CALL
    falls through).  ``BRA.DIV`` (taken only when the warp has diverged, to a slow path of the warp
    collectives) is followed only if ``follow_div``: by default the analysis assumes converged
    warps, so those fallback blocks are outside every loop."""
    if not instrs:
        return [], []
    index = {ins.addr: n for n, ins in enumerate(instrs)}
    leaders = {0}
    for n, ins in enumerate(instrs):
        if ins.base == "BRA":
            if ins.target is not None and ins.target in index:
                leaders.add(index[ins.target])
            leaders.add(n + 1)
        elif ins.base in _STOPS or ins.base == "CALL":
            leaders.add(n + 1)
    starts = sorted(p for p in leaders if p < len(instrs))
    blocks = [(a, b) for a, b in zip(starts, [*starts[1:], len(instrs)])]
    block_of = {a: k for k, (a, _) in enumerate(blocks)}
    succs: list[list[int]] = []
    for k, (_, b) in enumerate(blocks):
        last = instrs[b - 1]
        out: list[int] = []
        falls = k + 1 < len(blocks)
        if last.base == "BRA":
            div = "DIV" in last.opcode.split(".")[1:]
            if last.target is not None and last.target in index and (follow_div or not div):
                out.append(block_of[index[last.target]])
            falls = falls and (_is_conditional(last) or (div and not follow_div))
        elif last.base in _STOPS:
            falls = falls and last.pred not in (None, "@PT")
        if falls and k + 1 not in out:
            out.append(k + 1)
        succs.append(out)
    return blocks, succs


def _dominators(succs: Sequence[Sequence[int]], root: int = 0) -> list[int]:
    """Immediate dominator of each block reachable from ``root`` (-1: unreachable; the root is
    its own); Cooper, Harvey and Kennedy's iterative algorithm over the reverse postorder."""
    n = len(succs)
    order: list[int] = []
    seen = [False] * n
    stack: list[tuple[int, int]] = [(root, 0)] if n else []
    if n:
        seen[root] = True
    while stack:   # iterative DFS postorder
        node, k = stack.pop()
        if k < len(succs[node]):
            stack.append((node, k + 1))
            nxt = succs[node][k]
            if not seen[nxt]:
                seen[nxt] = True
                stack.append((nxt, 0))
        else:
            order.append(node)
    rpo = order[::-1]
    rank = {b: r for r, b in enumerate(rpo)}
    preds: list[list[int]] = [[] for _ in range(n)]
    for b in rpo:
        for c in succs[b]:
            preds[c].append(b)
    idom = [-1] * n
    if n:
        idom[root] = root
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            new = -1
            for p in preds[b]:
                if idom[p] == -1:
                    continue
                if new == -1:
                    new = p
                    continue
                x, y = p, new
                while x != y:
                    while rank[x] > rank[y]:
                        x = idom[x]
                    while rank[y] > rank[x]:
                        y = idom[y]
                new = x
            if new != idom[b]:
                idom[b] = new
                changed = True
    return idom


@dataclass
class Loop:
    """A natural loop of a function: ``header`` (the address its back edges jump to), its body as
    address ranges of basic blocks (``blocks``: (first, last) instruction address, inclusive),
    ``start``/``end`` the lowest and highest address in it.  ``counts``: the classes of every
    instruction in the body; ``own``: without those of nested loops (what one trip executes
    outside its inner loops if every path is taken -- a static count, branches inside the body
    are not weighed).  ``depth`` 0 is outermost."""

    header: int
    blocks: list[tuple[int, int]]
    depth: int = 0
    innermost: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    own: dict[str, int] = field(default_factory=dict)
    ranges: list[tuple[int, int]] = field(default_factory=list)      #: ``blocks``, adjacent merged
    own_ranges: list[tuple[int, int]] = field(default_factory=list)  #: the same, own code only

    @property
    def start(self) -> int:
        return self.blocks[0][0]

    @property
    def end(self) -> int:
        return self.blocks[-1][1]

    @property
    def label(self) -> str:
        return f"{self.start:#06x}-{self.end:#06x}"

    def contains(self, other: Loop) -> bool:
        """``other`` is nested in this loop (a proper subset of its blocks)."""
        mine = set(self.blocks)
        return self is not other and set(other.blocks) < mine


def find_loops(instrs: Sequence[Instr], follow_div: bool = False) -> list[Loop]:
    """The natural loops of a function, from its control flow graph (:func:`control_flow`): an
    edge u -> h whose target dominates its source is a back edge, and the loop of header h is h
    with every block that reaches a back-edge source without passing h (back edges to one header
    make one loop).  Blocks placed after the function's exit that jump back into it (the
    ``BRA.DIV`` fallbacks of the warp collectives, cold paths) are inside a loop only when they
    close a cycle through its header.  Irreducible cycles (no dominating header; ptxas does not
    emit them for structured source) are not found.  A subroutine of the function (the target of
    a ``CALL.REL``) is analysed as a second entry, but a call is not followed: a loop calling one
    counts the ``CALL``, not the callee.  The branch-to-self trap after the last EXIT is
    unreachable, so no loop."""
    blocks, succs = control_flow(instrs, follow_div)
    if not blocks:
        return []
    # a virtual root entering the function and every subroutine it calls (CALL.REL to an address
    # of its own, e.g. 64-bit division), so the subroutines' loops are found too
    first = {instrs[a].addr: k for k, (a, _) in enumerate(blocks)}
    calls = sorted({first[i.target] for i in instrs
                    if i.base == "CALL" and i.target is not None and i.target in first})
    root = len(blocks)
    idom = _dominators([*succs, [0, *calls]], root)
    preds: list[list[int]] = [[] for _ in blocks]
    for b, out in enumerate(succs):
        if idom[b] != -1:
            for c in out:
                preds[c].append(b)

    def dominates(h: int, b: int) -> bool:
        while True:
            if b == h:
                return True
            if b == root or idom[b] == -1:
                return False
            b = idom[b]

    bodies: dict[int, set[int]] = {}
    for u, out in enumerate(succs):
        if idom[u] == -1:
            continue
        for h in out:
            if dominates(h, u):
                body = bodies.setdefault(h, {h})
                work = [u]
                while work:
                    x = work.pop()
                    if x not in body:
                        body.add(x)
                        work.extend(preds[x])
    prefix = _Prefix(instrs)

    def span(b: int) -> tuple[int, int]:
        a, z = blocks[b]
        return instrs[a].addr, instrs[z - 1].addr

    def merged(bs: Iterable[int]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []   # position ranges of consecutive blocks, as addresses
        for b in sorted(bs):
            a, z = blocks[b]
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], z)
            else:
                out.append((a, z))
        return [(instrs[a].addr, instrs[z - 1].addr) for a, z in out]

    loops: list[Loop] = []
    sets: list[set[int]] = []
    for h, body in sorted(bodies.items(), key=lambda kv: blocks[kv[0]][0]):
        loops.append(Loop(instrs[blocks[h][0]].addr, sorted(span(b) for b in body)))
        sets.append(body)
    for lp, body in zip(loops, sets):
        inner = [o for o in sets if o is not body and o < body]
        lp.depth = sum(1 for o in sets if o is not body and body < o)
        lp.innermost = not inner
        lp.counts = prefix.counts(blocks[b] for b in body)
        nested = set().union(*inner) if inner else set()
        own = sorted(body - nested)
        lp.own = prefix.counts(blocks[b] for b in own)
        lp.ranges, lp.own_ranges = merged(body), merged(own)
    return loops


def multiply_loops(loops: Iterable[Loop]) -> list[Loop]:
    """The innermost loops holding multiply-class IMADs of two runtime values (loops whose only
    multiplies are by immediates -- address scaling such as ``j*8`` -- are left out)."""
    return [lp for lp in loops
            if lp.innermost and lp.counts.get("imad_mul", 0) > lp.counts.get("imad_mul_imm", 0)]


def converged_code(instrs: Sequence[Instr]) -> list[Instr]:
    """The instructions a warp can run while it stays converged: every basic block reachable from
    the entry (and from the subroutines it calls) without taking a ``BRA.DIV``.  Left out: the
    fallbacks ptxas adds for a diverged warp's shuffles and votes, and unreachable padding (the
    branch-to-self trap and NOPs after the last EXIT)."""
    blocks, succs = control_flow(instrs)
    if not blocks:
        return []
    first = {instrs[a].addr: k for k, (a, _) in enumerate(blocks)}
    roots = [0, *sorted({first[i.target] for i in instrs
                         if i.base == "CALL" and i.target is not None and i.target in first})]
    seen = set(roots)
    work = list(roots)
    while work:
        for c in succs[work.pop()]:
            if c not in seen:
                seen.add(c)
                work.append(c)
    return [instrs[p] for b in sorted(seen) for p in range(*blocks[b])]
