"""Fuzz the gRPC envelope decoder: ``GrpcTransport._deliver`` (the server side of ``Deliver``:
parse an ``Envelope`` from the peer's raw bytes, then authenticate, version/job/receiver/session/
checksum/size/sequence checks, queueing) and ``_parse_ack`` (the client side: a peer's ``Ack``).

Both are driven without network traffic: a real ``GrpcTransport`` (role ``host``, loopback, no TLS)
is built once, and its ``_deliver`` is called directly with the bytes, as gRPC's generic handler
would call it.  Its per-peer state (queues, sequence numbers, bound sessions, errors) is restored to
the freshly built state before every input, so each input is judged alone.

Input layout: one mode byte, then the bytes.

* bit 4 set: the bytes go to ``_parse_ack`` (must return an Ack or raise MalformedMessageError).
* otherwise they go to ``_deliver``; when bit 0 is set and they parse as an Envelope, the fields
  random mutation rarely gets right are repaired first (protocol version, job id, receiver, CRC-32
  of the payload; bits 2-3 pick the sender: keep, guest, arbiter; bit 1 echoes this transport's
  session nonce), so the checks behind them are reached.

``_deliver`` answers every envelope with an Ack (a refusal names the reason); it must never raise.
Seeds: envelopes of every kind a peer sends (hello, ping, data, bye, stale session, wrong job,
version, receiver) and a few Acks.
"""

from __future__ import annotations

import logging
import zlib
from collections import deque

import atheris

with atheris.instrument_imports(include=["unifl"]):  # coverage feedback from UniFL
    import _common
    from unifl.app.transport import envelope as env_mod
    from unifl.app.transport import grpc_transport as gt
    from unifl.core.errors import MalformedMessageError

logging.disable(logging.CRITICAL)   # every refusal is logged as a warning: noise at 10^5 inputs

JOB = "fuzz-job"
T = gt.GrpcTransport("host", "127.0.0.1:0", {"guest": "127.0.0.1:1", "arbiter": "127.0.0.1:2"},
                     JOB, timeout_s=1.0, server_workers=1)
SENDERS = (None, "guest", "arbiter", "guest")
HAS_PEER_SESSION = "peer_session" in env_mod.Envelope.DESCRIPTOR.fields_by_name
# the containers of per-peer state, as built: restored before every input
_STATE = {name: (type(v), v.copy()) for name, v in vars(T).items()
          if isinstance(v, (dict, set, deque, list))}


class _Context:
    """What ``_deliver`` may ask of gRPC's servicer context (no TLS here: no identity)."""

    def auth_context(self) -> dict:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def invocation_metadata(self) -> tuple:
        return ()


CONTEXT = _Context()


def _reset() -> None:
    for name, (_, orig) in _STATE.items():
        cur = getattr(T, name)
        cur.clear()
        if isinstance(cur, (dict, set)):
            cur.update(orig)
        else:
            cur.extend(orig)


def _repair(mode: int, raw: bytes) -> bytes:
    try:
        env = env_mod.Envelope.FromString(raw)
    except Exception:  # noqa: BLE001 - unparsable: delivered as is
        return raw
    env.protocol_version = env_mod.PROTOCOL_VERSION
    env.job_id = JOB
    env.receiver = "host"
    sender = SENDERS[(mode >> 2) & 3]
    if sender:
        env.sender = sender
    if mode & 2 and HAS_PEER_SESSION:
        env.peer_session = T.session
    env.crc32 = zlib.crc32(env.payload)
    return env.SerializeToString()


def test_one(data: bytes) -> None:
    if not data:
        return
    mode, raw = data[0], data[1:]
    if mode & 16:
        try:
            gt._parse_ack(raw, "host", "guest")
        except MalformedMessageError:
            return
        return
    _reset()
    if mode & 1:
        raw = _repair(mode, raw)
    ack = T._deliver(raw, CONTEXT)
    if not isinstance(ack, bytes):
        raise AssertionError(f"_deliver answered {type(ack).__name__}, not serialized Ack bytes")
    env_mod.Ack.FromString(ack)          # raises (a crash) if the answer is not an Ack


def seeds() -> list[bytes]:
    def env(**kw) -> bytes:
        fields = dict(protocol_version=env_mod.PROTOCOL_VERSION, job_id=JOB, sender="guest",
                      receiver="host", tag="grad", session=12345, seq=1, payload=b"UFLM\x01N")
        fields.update(kw)
        if "crc32" not in kw:
            fields["crc32"] = zlib.crc32(fields["payload"])
        if HAS_PEER_SESSION and "peer_session" not in kw:
            fields["peer_session"] = T.session
        elif not HAS_PEER_SESSION:
            fields.pop("peer_session", None)
        return env_mod.Envelope(**fields).SerializeToString()

    envs = [env(), env(seq=0, tag=getattr(gt, "HELLO_TAG", "__hello__"), payload=b""),
            env(seq=0, tag=gt.PING_TAG, payload=b""), env(seq=2, tag=gt.BYE_TAG, payload=b""),
            env(job_id="other"), env(protocol_version=99), env(receiver="arbiter"),
            env(sender="mallory"), env(crc32=1), env(seq=5), env(peer_session=0),
            env(payload=b"x" * 300), env(sender="arbiter", tag="t" * 40), b"", b"\x08\x01"]
    acks = [env_mod.Ack(protocol_version=env_mod.PROTOCOL_VERSION, seq=3).SerializeToString(),
            env_mod.Ack(error_code=4, error="out of order").SerializeToString(), b"\xff\xff"]
    out = []
    for e in envs:
        out += [bytes([0]) + e, bytes([1]) + e, bytes([3]) + e, bytes([7]) + e, bytes([11]) + e]
    out += [bytes([16]) + a for a in acks]
    return out


if __name__ == "__main__":
    _common.main(test_one, seeds, default_flags=["-max_len=2048"])
