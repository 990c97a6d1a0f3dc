"""The host's protocol guard: it answers only the queries SecureBoost makes."""

from __future__ import annotations

import numpy as np

from ...core.errors import ProtocolViolation
from ..params import BoostParams

__all__ = ["HostGuard", "is_int"]


def is_int(x: object) -> bool:
    """An integer of Python or NumPy, bools excluded (what a peer's count or index must be)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class HostGuard:
    """The host's own view of the tree the guest is growing, so that it answers only the queries
    the protocol needs and refuses anything else with :class:`~unifl.core.errors.ProtocolViolation`
    (naming the field and the limit) before doing any work for it.

    The host cannot see the guest's own splits, but it knows the structure they must have: per
    tree, levels come at depth 0, 1, ... < ``max_depth`` (its own params); the root holds every
    training row; at each later level the active nodes come in (left, right) pairs, each pair
    being *all* the rows of one node of the previous level (parents in order, each with >= 2
    rows), settled rows stay settled, and a node the host split itself must be partitioned
    exactly as the host answered.  Per level the guest gets one histogram per pair (of the smaller
    child, as :func:`grow_tree` picks it; the root's at depth 0) and at most one split query per
    active node (>= 2 rows), with a feature < the host's feature count and a bin < num_bins − 1
    (a split at the last bin sends every row left), each node at most once.  Without these
    bounds a guest could put every row in a node of its own, or ask every (feature, bin) at the
    root, and have the host's whole binned matrix handed to it by the split answers.

    What the guard cannot do: the histograms it lets through are sums of whatever the guest
    encrypted.  A guest that encrypts chosen values (2^k for row k) in place of its gradients
    reads the bins of ``cell_bits`` − 1 rows per histogram, and so the whole binned training
    matrix over a few trees -- inherent without a proof that the inputs are the gradients
    (docs/app.md, *SecureBoost*; tests/attacks/test_sbt_guest.py).
    """

    LEVEL_FIELDS = frozenset({"tree", "depth", "active", "nodes", "want"})

    def __init__(self, n_rows: int, n_features: int, p: BoostParams) -> None:
        self.n, self.fh, self.p = n_rows, n_features, p
        self.tree = -1

    def start_tree(self, tree: int) -> None:
        self.tree = tree
        self.depth = 0                      # the depth of the next level the guest may ask
        self.local: np.ndarray | None = None   # this level's node of every row (−1: settled)
        self.n_active = 0
        self.asked_splits = False
        self.host_left: dict[int, np.ndarray] = {}   # last level: node -> rows going left

    def check_level(self, level: object) -> tuple[int, np.ndarray, int, np.ndarray]:
        """(depth, node of every row, number of active nodes, wanted nodes) of a level request,
        after checking it against the host's own state."""
        if not isinstance(level, dict) or set(level) != self.LEVEL_FIELDS:
            got = sorted(level) if isinstance(level, dict) else type(level).__name__
            raise ProtocolViolation(f"SBT host: a level request must have the fields "
                                    f"{sorted(self.LEVEL_FIELDS)}, got {got}")
        tree, depth, n_active = level["tree"], level["depth"], level["active"]
        if not is_int(tree) or int(tree) != self.tree:
            raise ProtocolViolation(f"SBT host: level request for tree {tree!r}; the host is on "
                                    f"tree {self.tree} of n_trees = {self.p.n_trees}")
        if not is_int(depth) or int(depth) != self.depth:
            raise ProtocolViolation(f"SBT host: level request at depth {depth!r}; the next level "
                                    f"of tree {self.tree} is depth {self.depth}")
        if self.depth >= self.p.max_depth:
            raise ProtocolViolation(f"SBT host: depth {self.depth} is not below max_depth = "
                                    f"{self.p.max_depth}")
        if self.depth and not self.asked_splits:
            raise ProtocolViolation("SBT host: a new level before the split request of the last")
        limit = 1 if self.depth == 0 else 2 * self.n_active
        if not is_int(n_active) or not 1 <= int(n_active) <= limit:
            raise ProtocolViolation(f"SBT host: 'active' = {n_active!r} at depth {self.depth}; "
                                    f"it must lie in [1, {limit}]")
        n_active = int(n_active)
        nodes, want = level["nodes"], level["want"]
        for name, arr in (("nodes", nodes), ("want", want)):
            if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.ndim != 1:
                raise ProtocolViolation(f"SBT host: '{name}' must be a 1-d integer array")
        if nodes.shape != (self.n,):
            raise ProtocolViolation(f"SBT host: 'nodes' has shape {nodes.shape}; the host has "
                                    f"{self.n} training rows")
        local = nodes.astype(np.int64)
        if local.size and (local.min() < -1 or local.max() >= n_active):
            raise ProtocolViolation(f"SBT host: 'nodes' holds a node outside [-1, {n_active})")
        want = want.astype(np.int64)
        counts = np.bincount(local[local >= 0], minlength=n_active)
        if self.depth == 0:
            if not (local == 0).all():
                raise ProtocolViolation("SBT host: at depth 0 every training row is in the root")
            expect = np.zeros(1, np.int64)
        else:
            expect = self._check_children(local, n_active, counts)
        if want.shape != expect.shape or (want != expect).any():
            raise ProtocolViolation(f"SBT host: 'want' must name one node per pair of children "
                                    f"(the smaller, {len(expect)} in all), got {want.size} "
                                    "entries that differ")
        self.local, self.n_active, self.counts = local, n_active, counts
        self.host_left = {}
        self.asked_splits = False
        self.depth += 1
        return self.depth - 1, local, n_active, want

    def _check_children(self, local: np.ndarray, n_active: int, counts: np.ndarray
                        ) -> np.ndarray:
        """Check the pairs of this level against the previous level; the wanted nodes."""
        prev = self.local
        if prev is None:      # check_level asks for children only after a level was seen
            raise ProtocolViolation("SBT host: children before any level")
        if n_active % 2:
            raise ProtocolViolation(f"SBT host: {n_active} active nodes at depth {self.depth}; "
                                    "children come in pairs")
        if ((prev < 0) & (local >= 0)).any():
            raise ProtocolViolation("SBT host: 'nodes' puts a settled row back into a node")
        pair = np.where(local >= 0, local // 2, -1)
        prev_counts = np.bincount(prev[prev >= 0], minlength=self.n_active)
        parents: list[int] = []
        for j in range(n_active // 2):
            in_pair = pair == j
            found = np.unique(prev[in_pair])
            if found.size != 1 or found[0] < 0 or \
                    int(in_pair.sum()) != int(prev_counts[found[0]]) or prev_counts[found[0]] < 2:
                raise ProtocolViolation(f"SBT host: the children {2 * j}, {2 * j + 1} at depth "
                                        f"{self.depth} are not all the rows of one node (of >= 2 "
                                        "rows) of the last level")
            parent = int(found[0])
            if parents and parent <= parents[-1]:
                raise ProtocolViolation(f"SBT host: the children of node {parent} come out of "
                                        "order or twice")
            parents.append(parent)
            left = self.host_left.get(parent)
            if left is not None and not np.array_equal(local == 2 * j, in_pair & left):
                raise ProtocolViolation(f"SBT host: node {parent} was split by the host, but its "
                                        "children are not the host's partition")
        missing = set(self.host_left) - set(parents)
        if missing:
            raise ProtocolViolation(f"SBT host: node(s) {sorted(missing)} were split by the host "
                                    "but have no children")
        left_c, right_c = counts[0::2], counts[1::2]
        return np.where(left_c <= right_c, np.arange(0, n_active, 2), np.arange(1, n_active, 2))

    def check_splits(self, splits: object) -> list[tuple[int, int, int]]:
        """The split request of the current level as (node, feature, bin), all checked first."""
        if self.local is None or self.asked_splits:
            raise ProtocolViolation("SBT host: a split request without a level request before it")
        if not isinstance(splits, (list, tuple)):
            raise ProtocolViolation(f"SBT host: 'splits' must be a list, got "
                                    f"{type(splits).__name__}")
        if len(splits) > self.n_active:
            raise ProtocolViolation(f"SBT host: {len(splits)} split queries at depth "
                                    f"{self.depth - 1}; at most one per active node "
                                    f"({self.n_active})")
        out, seen = [], set()
        last_bin = self.p.num_bins - 1
        for s in splits:
            if not isinstance(s, (list, tuple)) or len(s) != 3 or not all(map(is_int, s)):
                raise ProtocolViolation("SBT host: a split query must be [node, feature, bin] "
                                        "(integers)")
            i, f, b = (int(v) for v in s)
            if not 0 <= i < self.n_active:
                raise ProtocolViolation(f"SBT host: split node {i} is not an active node "
                                        f"(0 <= node < {self.n_active})")
            if i in seen:
                raise ProtocolViolation(f"SBT host: node {i} asked twice at depth {self.depth - 1}")
            if self.counts[i] < 2:
                raise ProtocolViolation(f"SBT host: node {i} has {self.counts[i]} row(s); only a "
                                        "node of >= 2 rows is split")
            if not 0 <= f < self.fh:
                raise ProtocolViolation(f"SBT host: split feature {f} outside [0, {self.fh})")
            if not 0 <= b < last_bin:
                raise ProtocolViolation(f"SBT host: split bin {b} outside [0, {last_bin}) "
                                        f"(num_bins = {self.p.num_bins})")
            seen.add(i)
            out.append((i, f, b))
        self.asked_splits = True
        return out

    def answered(self, node: int, left: np.ndarray) -> None:
        """Remember the host's answer (rows of ``node`` going left, as a mask over all rows)."""
        self.host_left[node] = left
