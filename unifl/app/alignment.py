"""Row alignment without PSI: both parties must hold the same ids, checked by comparing digests of
the canonically sorted ids (:func:`unifl.app.data.sorted_ids`) before any key exists."""

from __future__ import annotations

import hashlib

from ..core.errors import ConfigError
from .channel import Channel


def ids_digest(ids: list[str]) -> str:
    """SHA-256 (hex) of the ids joined by newlines, in the order given."""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def check_alignment(role: str, peer: str, channel: Channel, ids: list[str]) -> None:
    """Send this party's digest of ``ids`` and compare it with the peer's.

    Raises:
        ConfigError: the digests differ (the parties hold different rows: run PSI first).
    """
    channel.send(peer, "vfl/ids_digest", ids_digest(ids))
    theirs = channel.recv(peer, "vfl/ids_digest")
    if theirs != ids_digest(ids):
        raise ConfigError(f"{role}: the parties' ids differ; run PSI first (algorithm psi+vlr)")
