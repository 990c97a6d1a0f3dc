"""Fixtures shared by the scheduler's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A fresh private cache folder (unifl.scheduler.cache) for this test: ``XDG_CACHE_HOME`` in
    tmp_path, the cache switched on; returns the folder the cache will use."""
    home = tmp_path / "xdg"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("UNIFL_CALIBRATION_CACHE", raising=False)
    return home / "unifl"
