"""Party-to-party transport over gRPC: a versioned protobuf envelope (job id, sender, receiver,
tag, session, sequence number, payload, CRC), retries that cannot duplicate, deadlines on every
receive, optional mutual TLS, size limits.  ``GrpcTransport`` implements the ``Transport`` protocol
of :mod:`unifl.app.channel`."""

from .envelope import PROTOCOL_VERSION, Ack, Envelope, ErrorCode
from .grpc_transport import GrpcTransport, TlsFiles, from_config

__all__ = ["GrpcTransport", "TlsFiles", "from_config", "Envelope", "Ack", "ErrorCode",
           "PROTOCOL_VERSION"]
