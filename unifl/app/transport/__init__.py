"""Party-to-party transport over gRPC: a versioned protobuf envelope (job id, sender, receiver,
tag, session, sequence number, payload, CRC), retries that cannot duplicate, deadlines on every
receive, mutual TLS (required off the loopback), senders authenticated before anything about them
is recorded, a session handshake against replays, size limits and per-peer queue caps.
``unifl.app.transport.pki`` makes throwaway certificates for demos and tests.  ``GrpcTransport`` implements the ``Transport`` protocol
of :mod:`unifl.app.channel`."""

from .envelope import PROTOCOL_VERSION, Ack, Envelope, ErrorCode
from .grpc_transport import GrpcTransport, TlsFiles, from_config

__all__ = ["GrpcTransport", "TlsFiles", "from_config", "Envelope", "Ack", "ErrorCode",
           "PROTOCOL_VERSION"]
