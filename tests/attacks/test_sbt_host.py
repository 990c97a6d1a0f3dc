"""What a malicious SecureBoost host learns: it answers for its own features, and nothing proves
they are its real data.

The guest refuses histograms that are not sums of its own [[ĝ + 2^64 ĥ]] over a partition of the
node per feature (tests/attacks/test_review.py), but a partition of the host's choosing passes: a
host that enters a feature of its own making -- bin 0 for a row set S it picks, bin 1 for the rest
-- learns from the split queries whether S is the best split of a node, i.e. one bit about the
labels of S per node.  Here S = the positive training rows (a guess that happens to be right) is
split on at the root, a random S is not.
"""

from __future__ import annotations

import numpy as np
import pytest

import unifl
from unifl.app.jobs import run_local
from unifl.app.secureboost import protocol as sbt_protocol

BE = unifl.backend("native")


def run_with_fake_feature(monkeypatch, pick) -> dict:
    real = sbt_protocol._prepare

    def prepare(role, job, p, ids, data_dir, data=None):
        bins_tr, bins_te, edges, y_tr, y_te = real(role, job, p, ids, data_dir, data)
        if role == "host":
            # the host's guess of a row set (the test's oracle stands in for its luck)
            labels = real("guest", job, p, ids, data_dir)[3]
            fake = np.ones(len(bins_tr), np.int32)
            fake[pick(labels, len(bins_tr))] = 0
            bins_tr = bins_tr.copy()
            bins_tr[:, 0] = fake
        return bins_tr, bins_te, edges, y_tr, y_te

    monkeypatch.setattr(sbt_protocol, "_prepare", prepare)
    job = {"algorithm": "secureboost", "dataset": "breast", "seed": 1, "key_bits": 1024,
           "parties": ["guest", "host"],
           "params": {"n_trees": 1, "max_depth": 1, "num_bins": 4}}
    return run_local(job, BE)


@pytest.mark.parametrize("guess,split_on_it", [
    (lambda y, n: np.flatnonzero(y == 1), True),
    (lambda y, n: np.random.default_rng(0).choice(n, n // 2, replace=False), False),
], ids=["right guess", "random guess"])
def test_a_host_feature_of_its_own_making_is_accepted_and_answers_a_question(monkeypatch, guess,
                                                                             split_on_it):
    res = run_with_fake_feature(monkeypatch, guess)
    records = res["host"]["model"]["records"]
    asked = [r["feature"] for r in records]
    assert (asked == [0]) is split_on_it, asked
