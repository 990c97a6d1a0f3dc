"""Where the checkout is, for tests that read its files or start its commands."""

from __future__ import annotations

from pathlib import Path

#: the repository root (tests/helpers/paths.py is two folders below it)
ROOT = Path(__file__).resolve().parents[2]
