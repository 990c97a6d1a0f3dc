"""The wire messages (``Envelope``, ``Ack``) of ``unifl_transport.proto``, built at import.

Why at import: the schema is two small messages, so building their ``FileDescriptorProto`` here
(with protobuf's own descriptor API, in a private descriptor pool) gives real protobuf classes with
no generated ``*_pb2.py`` to keep in sync with a protobuf version and no ``protoc`` step in the
build.  The ``.proto`` file beside this module is the readable spec; a test checks they agree.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol, TypeVar, cast

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

#: 2: the session handshake (``Envelope.peer_session``, ``Ack.session``); a v1 peer is refused by
#: name instead of failing the handshake in a confusing way
PROTOCOL_VERSION = 2
PACKAGE = "unifl.transport.v1"
SERVICE = f"{PACKAGE}.Transport"
DELIVER_METHOD = f"/{SERVICE}/Deliver"

_F = descriptor_pb2.FieldDescriptorProto
#: (name, number, type) per message, in the order of the .proto file
SCHEMA: dict[str, list[tuple[str, int, int]]] = {
    "Envelope": [("protocol_version", 1, _F.TYPE_UINT32), ("job_id", 2, _F.TYPE_STRING),
                 ("sender", 3, _F.TYPE_STRING), ("receiver", 4, _F.TYPE_STRING),
                 ("tag", 5, _F.TYPE_STRING), ("session", 6, _F.TYPE_UINT64),
                 ("seq", 7, _F.TYPE_UINT64), ("payload", 8, _F.TYPE_BYTES),
                 ("crc32", 9, _F.TYPE_FIXED32), ("peer_session", 10, _F.TYPE_UINT64)],
    "Ack": [("protocol_version", 1, _F.TYPE_UINT32), ("seq", 2, _F.TYPE_UINT64),
            ("duplicate", 3, _F.TYPE_BOOL), ("error_code", 4, _F.TYPE_UINT32),
            ("error", 5, _F.TYPE_STRING), ("session", 6, _F.TYPE_UINT64)],
}


class ErrorCode(enum.IntEnum):
    """Why a receiver refused an envelope (``Ack.error_code``)."""
    OK = 0
    MALFORMED = 1       # unparsable, bad checksum
    VERSION = 2         # another protocol version
    JOB = 3             # another job id
    SEQUENCE = 4        # gap in the sequence numbers
    RECEIVER = 5        # addressed to another role
    UNKNOWN_SENDER = 6  # sender is not a configured peer
    IDENTITY = 7        # TLS certificate does not name the claimed sender
    CLOSED = 8          # receiver is shutting down
    SESSION = 9         # no handshake, a replayed/stale session, or a second session from a sender
    QUOTA = 10          # the sender has too many bytes or messages queued at the receiver


class EnvelopeMessage(Protocol):
    """An ``Envelope`` (fields as in ``SCHEMA``; protobuf's defaults when unset)."""

    protocol_version: int
    job_id: str
    sender: str
    receiver: str
    tag: str
    session: int
    seq: int
    payload: bytes
    crc32: int
    peer_session: int

    def SerializeToString(self) -> bytes: ...  # noqa: N802 -- protobuf's name


class AckMessage(Protocol):
    """An ``Ack`` (fields as in ``SCHEMA``; protobuf's defaults when unset)."""

    protocol_version: int
    seq: int
    duplicate: bool
    error_code: int
    error: str
    session: int

    def SerializeToString(self) -> bytes: ...  # noqa: N802 -- protobuf's name


_M = TypeVar("_M", covariant=True)


class MessageClass(Protocol[_M]):
    """A message class built by ``_build``: made from field values, or parsed from bytes."""

    def __call__(self, **fields: Any) -> _M: ...

    def FromString(self, s: bytes) -> _M: ...  # noqa: N802 -- protobuf's name


def _build() -> tuple[type[Message], ...]:
    fdp = descriptor_pb2.FileDescriptorProto(name="unifl_transport.proto", package=PACKAGE,
                                             syntax="proto3")
    for msg_name, fields in SCHEMA.items():
        msg = fdp.message_type.add(name=msg_name)
        for name, number, ftype in fields:
            msg.field.add(name=name, number=number, type=ftype, label=_F.LABEL_OPTIONAL)
    svc = fdp.service.add(name="Transport")
    svc.method.add(name="Deliver", input_type=f".{PACKAGE}.Envelope",
                   output_type=f".{PACKAGE}.Ack")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{m}"))
                 for m in SCHEMA)


_envelope, _ack = _build()
# the classes are made at run time from SCHEMA, so their fields are unknown to mypy: these casts
# state them (the Protocols above list SCHEMA's fields; a test checks SCHEMA against the .proto)
Envelope = cast("MessageClass[EnvelopeMessage]", _envelope)
Ack = cast("MessageClass[AckMessage]", _ack)
