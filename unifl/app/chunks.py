"""The chunk streams of the streamed algorithms: one batch's (or one tree level's) rows travel as
consecutive chunks under one tag, then an end marker, so that no party builds the encrypted
array of a whole batch and a peer that deviates from the shared schedule is caught at once.

On the wire (``unifl.app.codec``, no pickle), under one tag per stream (its messages arrive in
send order)::

    {"chunk": k, "rows": [start, stop], "data": <payload of rows start .. stop−1>}   k = 0 .. C−1
    {"end": C}

``start``/``stop`` are positions in the batch's (level's) own row list, which both parties
compute from the shared schedule; nothing in a chunk message is taken from the peer: the
receiver checks every field against its own schedule (:func:`chunk_bounds`) and refuses with
:class:`~unifl.core.errors.ProtocolViolation` a chunk out of order or repeated (k is not the next
index), a row range or size that is not the one due, a stream that ends early (the end marker
where chunk k is due) and one with extra chunks (a chunk where the end marker is due).  The
payload is then checked by the caller (key, shape = the rows it expects, scale).
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ProtocolViolation
from .batching import chunk_bounds
from .channel import Messenger

__all__ = ["chunk_bounds", "send_chunk", "send_end", "recv_chunk", "recv_end"]

_CHUNK_FIELDS = frozenset({"chunk", "rows", "data"})


def send_chunk(channel: Messenger, peer: str, tag: str, k: int, bounds: tuple[int, int],
               data: Any) -> None:
    """Chunk ``k`` of the stream ``tag``: rows ``bounds`` = (start, stop) and their payload."""
    channel.send(peer, tag, {"chunk": int(k), "rows": [int(bounds[0]), int(bounds[1])],
                             "data": data})


def send_end(channel: Messenger, peer: str, tag: str, count: int) -> None:
    """The end marker of the stream ``tag`` after ``count`` chunks."""
    channel.send(peer, tag, {"end": int(count)})


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def recv_chunk(channel: Messenger, peer: str, tag: str, k: int, bounds: tuple[int, int],
               count: int, what: str) -> Any:
    """The payload of chunk ``k`` (of ``count``, rows ``bounds``) of the stream ``tag``, after
    checking the message against this party's own schedule.

    Raises:
        ProtocolViolation: not a chunk message, the stream ended early, the chunk is not chunk
            ``k`` (reordered or repeated), or its rows are not ``bounds``.
    """
    msg = channel.recv(peer, tag)
    if isinstance(msg, dict) and set(msg) == {"end"}:
        raise ProtocolViolation(f"{what}: {peer} ended the stream after {msg['end']!r} chunk(s) "
                                f"where chunk {k} of {count} is due")
    if not isinstance(msg, dict) or set(msg) != _CHUNK_FIELDS:
        got = sorted(msg) if isinstance(msg, dict) else type(msg).__name__
        raise ProtocolViolation(f"{what}: a chunk message must have the fields "
                                f"{sorted(_CHUNK_FIELDS)}, got {got}")
    if not _is_int(msg["chunk"]) or msg["chunk"] != k:
        raise ProtocolViolation(f"{what}: {peer} sent chunk {msg['chunk']!r} where chunk {k} of "
                                f"{count} is due (chunks out of order or repeated)")
    rows = msg["rows"]
    if not isinstance(rows, (list, tuple)) or len(rows) != 2 or not all(map(_is_int, rows)) \
            or (int(rows[0]), int(rows[1])) != (int(bounds[0]), int(bounds[1])):
        raise ProtocolViolation(f"{what}: {peer}'s chunk {k} covers rows {rows!r:.60}; this "
                                f"party's schedule has [{bounds[0]}, {bounds[1]})")
    return msg["data"]


def recv_end(channel: Messenger, peer: str, tag: str, count: int, what: str) -> None:
    """The end marker of the stream ``tag``, which must follow exactly ``count`` chunks.

    Raises:
        ProtocolViolation: another chunk (more than ``count``) or anything else.
    """
    msg = channel.recv(peer, tag)
    if isinstance(msg, dict) and set(msg) == _CHUNK_FIELDS:
        raise ProtocolViolation(f"{what}: {peer} sent more than the {count} chunk(s) of this "
                                f"party's schedule (chunk {msg['chunk']!r:.20} after the last)")
    if not isinstance(msg, dict) or set(msg) != {"end"} or not _is_int(msg["end"]) \
            or msg["end"] != count:
        raise ProtocolViolation(f"{what}: expected the end of a stream of {count} chunk(s) from "
                                f"{peer}, got {msg!r:.80}")
