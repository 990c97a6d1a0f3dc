"""Counting a job's reads of the party files, for tests that hold a job to one read per party."""

from __future__ import annotations

from collections import Counter
from types import ModuleType

from unifl.app.data import load_party


def count_reads(monkeypatch, *modules: ModuleType) -> Counter:
    """Each role's reads of its data file through ``load_party`` as ``modules`` call it (the names
    they imported); the counter fills as the job runs."""
    reads: Counter = Counter()

    def counted(dataset, role, *a, **k):
        reads[role] += 1
        return load_party(dataset, role, *a, **k)
    for module in modules:
        monkeypatch.setattr(module, "load_party", counted)
    return reads
