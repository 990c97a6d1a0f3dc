"""What a malicious SecureBoost guest learns: the host's binned training matrix, and nothing else.

The guest's [[ĝ + 2^64 ĥ]] are its own input: nothing ties them to gradients.  Encrypting 2^k for
row k of a chosen set (0 elsewhere) turns every histogram cell of the host's answer into a bitmask
of the rows in that bin: a cell holds ``cell_bits`` bits (99 on breast's 455 training rows at
scale 2^-24), so one root histogram reads 98 rows' bins of every host feature, and the five root
histograms of the default five trees read all 455 × 20, every query inside the host's guard.  What
the host sends is a function of its bins alone (the test recomputes every decrypted cell from the
bins and the chosen plaintexts): no value inside a bin, no bin edge.

A range proof per packed slot would not close this: with every slot inside the honest range
(|ĝ| <= 2^s, 0 <= ĥ <= 2^(s−2)) the same trick reads 48 rows per histogram, and the root, depth-1
and depth-2 histograms of four trees (all the guard allows) cover breast again.  docs/app.md states
the leakage; this file shows exactly it.
"""

from __future__ import annotations

import numpy as np
import pytest

import unifl
from unifl.app.channel import Channel, local_transports
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import validate_job
from unifl.app.params import BoostParams
from unifl.app.secureboost import packing
from unifl.app.secureboost import protocol as sbt_protocol
from unifl.app.timing import Timings
from unifl.phe_sdk import EncryptedArray, paillier

from tests.helpers.party import Party

BE = unifl.backend("native")
BITS = 1024
SCALE = 24


@pytest.fixture(scope="module")
def setup():
    """The default SecureBoost job on all of breast (5 trees, depth 3, 16 bins), the host's own
    binned training matrix, and a key pair for the guest."""
    job = validate_job({"algorithm": "secureboost", "dataset": "breast", "seed": 42,
                        "key_bits": BITS, "params": {}})
    p = BoostParams.from_job(job["params"])
    ids = sorted_ids(load_party("breast", "host").ids)
    bins = sbt_protocol._prepare("host", job, p, ids, None)[0]
    return job, p, ids, bins, paillier.keygen(BITS)


class Guest:
    """A guest that speaks the protocol to the real host and chooses its own plaintexts."""

    def __init__(self, setup) -> None:
        job, self.p, ids, self.bins, (self.pk, self.sk) = setup
        t = local_transports()
        self.ch, h = Channel(t["guest"], 60, BE), Channel(t["host"], 60, BE)
        self.host = Party(lambda: sbt_protocol._host(job, self.p, h, BE, Timings(), ids, None), h)
        self.ch.send("host", "sbt/pk", self.pk)
        info = self.ch.recv("host", "sbt/info")
        self.n, self.fh = int(info["rows"]), int(info["features"])
        self.width = packing.cell_bits(self.n, SCALE)
        self.per = packing.cells_per_ciphertext(self.pk, self.width)
        self.received: list[list[int]] = []          # every decrypted cell, in order

    def level(self, tree: int, depth: int, nodes: np.ndarray, want: list[int],
              plain: np.ndarray) -> np.ndarray:
        """One level request, the chosen plaintexts of the wanted rows, and the host's histograms
        decrypted: cells (F, len(want), B) as Python ints (the packed integer Σ of each cell)."""
        nodes = np.asarray(nodes, np.int64)
        active = int(nodes.max()) + 1
        self.ch.send("host", f"sbt/t{tree}/level", {
            "tree": tree, "depth": depth, "active": active, "nodes": nodes.astype(np.int32),
            "want": np.asarray(want, np.int32)})
        rows = sbt_protocol.wanted_rows(nodes, active, want)
        enc = EncryptedArray.encrypt(self.pk, plain[rows], backend=BE)
        tag = f"sbt/t{tree}/d{depth}/gh"
        self.ch.send("host", tag, {"chunk": 0, "rows": [0, len(rows)], "data": enc})
        self.ch.send("host", tag, {"end": 1})
        hist = self.ch.recv("host", f"sbt/t{tree}/d{depth}/hist")
        cells = packing.split_cells(hist.decrypt(self.sk).tolist(), self.width, self.per)
        count = self.fh * len(want) * self.p.num_bins
        self.received.append(cells[:count])
        reply = self.splits(tree, depth)
        assert reply == {"records": [], "left": []}
        return np.array(cells[:count], dtype=object).reshape(self.fh, len(want), self.p.num_bins)

    def splits(self, tree: int, depth: int) -> dict:
        self.ch.send("host", f"sbt/t{tree}/d{depth}/splits", [])
        return self.ch.recv("host", f"sbt/t{tree}/d{depth}/left")

    def end_tree(self, tree: int) -> None:
        self.ch.send("host", f"sbt/t{tree}/level", None)

    def finish(self) -> dict:
        test_left = self.ch.recv("host", "sbt/test_left")
        self.host.join()
        assert self.host.error is None, self.host.error
        return test_left


def read_bits(cells: np.ndarray, rows: list[int], bit_of: dict[int, int], out: np.ndarray,
              part=lambda v: v) -> None:
    """Row r's bin of feature f = the bin whose cell has bit ``bit_of[r]`` set."""
    for f in range(cells.shape[0]):
        for b in range(cells.shape[1]):
            v = int(part(cells[f, b]))
            for r in rows:
                if v >> bit_of[r] & 1:
                    out[r, f] = b


def expected_cells(bins: np.ndarray, rows: np.ndarray, plain: np.ndarray, fh: int,
                   num_bins: int) -> list[int]:
    """What a histogram of the rows ``rows`` must hold, computed from the host's bins and the
    plaintexts alone: cell (f, b) = Σ plain[r] over rows r with bin_f(r) = b."""
    out = [0] * (fh * num_bins)
    for r in rows:
        for f in range(fh):
            out[f * num_bins + int(bins[r, f])] += int(plain[r])
    return out


def test_chosen_plaintexts_read_the_whole_binned_matrix_from_five_roots(setup):
    guest = Guest(setup)
    n, fh, nb = guest.n, guest.fh, guest.p.num_bins
    per_hist = guest.width - 1                              # bits 0 .. w−2: sums stay below 2^(w−1)
    assert (guest.width, per_hist) == (99, 98) and n == 455 and fh == 20
    stolen = np.full((n, fh), -1, np.int64)
    order = np.arange(n)
    for tree in range(guest.p.n_trees):
        batch = order[tree * per_hist:(tree + 1) * per_hist].tolist()
        plain = np.zeros(n, dtype=object)
        plain[batch] = [1 << k for k in range(len(batch))]
        cells = guest.level(tree, 0, np.zeros(n), [0], plain)
        assert guest.received[-1] == expected_cells(guest.bins, np.arange(n), plain, fh, nb)
        read_bits(cells[:, 0, :], batch, {r: k for k, r in enumerate(batch)}, stolen)
        guest.end_tree(tree)
    assert guest.finish() == {}                          # no host split: no test partition
    assert (stolen == guest.bins).all()                 # 100 % of the 455 × 20 bins


def test_in_range_slots_still_read_the_binned_matrix(setup):
    """Every plaintext a valid packed slot (|ĝ| <= 2^24, 0 <= ĥ <= 2^22): 48 rows per histogram,
    three useful histograms per tree (root, the smaller child at depth 1, one at depth 2): breast
    in four trees.  A range proof per slot would cost its proofs and leave this."""
    guest = Guest(setup)
    n, fh = guest.n, guest.fh
    g_rows, h_rows = SCALE + 1, SCALE - 1               # bits of ĝ and of ĥ a row can own
    per_hist = g_rows + h_rows
    stolen = np.full((n, fh), -1, np.int64)
    unread = list(range(n))

    def chosen(batch):
        plain = np.zeros(n, dtype=object)
        for k, r in enumerate(batch):
            g, h = (1 << k, 0) if k < g_rows else (0, 1 << (k - g_rows))
            assert abs(g) <= 1 << SCALE and 0 <= h <= 1 << (SCALE - 2)
            plain[r] = packing.pack_gh(np.array([g]), np.array([h]))[0]
        return plain

    def read(cells, batch):
        bit_g = {r: k for k, r in enumerate(batch) if k < g_rows}
        bit_h = {r: k - g_rows for k, r in enumerate(batch) if k >= g_rows}
        sums = np.vectorize(lambda v: packing.unpack_gh([int(v)]), otypes=[object])(cells)
        read_bits(sums, list(bit_g), bit_g, stolen, lambda gh: gh[0][0])
        read_bits(sums, list(bit_h), bit_h, stolen, lambda gh: gh[1][0])

    tree = 0
    while unread:
        # depth 0: the root
        batch, unread = unread[:per_hist], unread[per_hist:]
        read(guest.level(tree, 0, np.zeros(n), [0], chosen(batch))[:, 0, :], batch)
        # depth 1: the next rows as the smaller child of the root
        batch, unread = unread[:per_hist], unread[per_hist:]
        d1 = np.where(np.isin(np.arange(n), batch), 0, 1)
        if len(batch) and (d1 == 1).sum() >= len(batch):
            read(guest.level(tree, 1, d1, [0], chosen(batch))[:, 0, :], batch)
            # depth 2: child 0 split off one row (want it), child 1 split off the next rows
            batch, unread = unread[:per_hist], unread[per_hist:]
            first = np.flatnonzero(d1 == 0)[0]
            d2 = np.where(d1 == 0, np.where(np.arange(n) == first, 0, 1),
                          np.where(np.isin(np.arange(n), batch), 2, 3))
            if len(batch) and (d2 == 3).sum() >= len(batch):
                cells = guest.level(tree, 2, d2, [0, 2], chosen(batch))
                read(cells[:, 1, :], batch)
            else:
                unread = batch + unread
        else:
            unread = batch + unread
        guest.end_tree(tree)
        tree += 1
    for rest in range(tree, guest.p.n_trees):
        guest.end_tree(rest)
    guest.finish()
    assert tree <= 4 and (stolen == guest.bins).all()
