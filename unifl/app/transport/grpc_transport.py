"""``GrpcTransport``: the ``Transport`` of a party that runs in its own process, over gRPC.

Each party runs a gRPC server with one unary method, ``Deliver(Envelope) -> Ack``; received
payloads wait in per-(sender, tag) FIFO queues until the party's ``recv`` takes them.  ``send``
returns once the peer has queued the message (its Ack), so messages of one (sender, receiver) pair
arrive in send order.

Guarantees:

* **No duplicates from retries.**  A message gets its sequence number once; a retry after a lost
  Ack resends the same (session, seq), and the receiver acknowledges it as a duplicate without
  queueing it again.  ``session`` is random per transport, so a restarted sender is a new stream
  (refused unless the job resumes, see Sessions below).
* **No silent loss.**  A gap in a sender's sequence numbers is a :class:`SequenceError` at both ends.
* **No hangs.**  Every ``recv`` has a deadline (:class:`PeerTimeout` naming peer, address and tag);
  every ``send`` retries only until its deadline (:class:`PeerUnavailable`).  A peer that closes
  sends a goodbye, after which waiting for it is :class:`PeerClosed` at once.
* **A dead or cut-off peer within ``liveness_s``.**  A background thread pings every configured
  peer every ``liveness_s``/4 s, whatever the party is doing (computing, sending, receiving).  A
  peer that has answered before (a message, an acknowledgement or a ping) and then answers nothing
  for ``liveness_s`` s, with at least two pings in a row failed -- refused (its process is gone)
  or unanswered (frozen, or the network between us partitioned) -- is :class:`PeerUnavailable`:
  a ``recv`` or ``send`` waiting for it ends at most about a quarter of a second after that, and
  one that starts later ends at once, however long ``timeout_s`` is.  A ping times out after
  max(``liveness_s``/4, min(1 s, ``liveness_s``/2)), so two failures fit in ``liveness_s``; a
  peer that never answered anything (not started yet) is waited for until ``timeout_s``.
* **Named refusals.**  Another protocol version (:class:`ProtocolVersionError`), another job id
  (:class:`JobMismatchError`), an unparsable or corrupted envelope (:class:`MalformedMessageError`),
  an oversized message (:class:`MessageTooLarge`): the sender gets the error from the Ack, and the
  receiver's next ``recv`` from that peer raises it too instead of waiting.
* **Mutual TLS** when ``tls`` is given: both ends present certificates signed by the configured CA;
  a party's certificate names its role (SAN DNS entry or CN), the client checks that the server it
  reached is the role it meant (target-name override), and the server refuses an envelope whose
  sender differs from the role in the client's certificate (no spoofing another party).
  ``mutually_authenticated`` is True exactly then.  Without TLS nothing identifies a sender, so
  plaintext is refused for any address off the loopback unless ``insecure=True`` says otherwise.
* **Authenticate first.**  An envelope is checked against the sender it claims (a configured peer;
  with TLS, the role in the client's certificate) before anything is recorded about that sender:
  a spoofed or unauthenticated envelope is refused and leaves no trace in the real sender's
  stream.  Without TLS there is no identity to check, so on a plaintext link any local process can
  still break a stream (the loopback demo accepts that; deployments use mutual TLS).
* **Sessions.**  Before its first message to a peer a transport sends a hello (seq 0, never
  queued); the Ack carries the receiver's random session nonce, and every later envelope echoes
  it (``peer_session``).  An envelope that does not carry this transport's nonce (no handshake, or
  a recording of another run replayed into this one) is refused with :class:`SessionError` and
  leaves no trace.  The first accepted envelope binds the sender's session; another session from
  the same role afterwards (a restarted or second party) is refused with :class:`SessionError`
  unless this transport was created with ``resume=True``.
* **Bounded queues.**  At most ``max_queued_messages`` messages and ``max_queued_mb`` MiB wait per
  peer; beyond that the envelope is refused (:class:`PeerQuotaExceeded` for the sender, and for
  the receiver's next ``recv`` from that peer) instead of growing memory.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import zlib
from collections import deque
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, TypeAlias, cast

import grpc

from ...configs import PartyConfig
from ...configs.schema import is_loopback_address
from ...core.errors import (ConfigError, JobMismatchError, MalformedMessageError, MessageTooLarge,
                       PeerClosed, PeerQuotaExceeded, PeerTimeout, PeerUnavailable,
                       ProtocolVersionError, SequenceError, SessionError, TransportError)
from .envelope import (DELIVER_METHOD, PROTOCOL_VERSION, SERVICE, Ack, AckMessage, Envelope,
                       ErrorCode)

log = logging.getLogger("unifl.transport")

ROLES = ("guest", "host", "arbiter")
BYE_TAG = "__bye__"           # control message: the sender closed its transport
PING_TAG = "__ping__"         # control message (seq 0, never queued): is the peer's process alive?
HELLO_TAG = "__hello__"       # control message (seq 0, never queued): the receiver's session nonce
DEFAULT_MAX_QUEUED_MESSAGES = 4096
#: a ping not answered within this is a failed ping (at most liveness_s / 2, at least liveness_s /
#: 4: two failed pings then fit into liveness_s)
MIN_PING_TIMEOUT_S = 1.0
#: a waiting recv or send looks at the peer's liveness at least this often (seconds)
LIVENESS_WAKE_S = 0.25
#: reconnect back-off cap (ms): a peer that starts late is reached within a second of starting
MAX_RECONNECT_BACKOFF_MS = 1000
ENVELOPE_OVERHEAD = 64 * 1024  # room for the envelope's header fields above the payload limit
#: refusals logged per window, the rest only counted: anyone who can reach the port can send
#: refused envelopes, and each must not cost a log line (flooding the party's log)
REFUSAL_LOG_BURST = 20
REFUSAL_LOG_WINDOW_S = 10.0

_CODE_ERRORS = {ErrorCode.MALFORMED: MalformedMessageError, ErrorCode.VERSION: ProtocolVersionError,
                ErrorCode.JOB: JobMismatchError, ErrorCode.SEQUENCE: SequenceError,
                ErrorCode.RECEIVER: MalformedMessageError,
                ErrorCode.UNKNOWN_SENDER: MalformedMessageError,
                ErrorCode.IDENTITY: TransportError, ErrorCode.CLOSED: PeerClosed,
                ErrorCode.SESSION: SessionError, ErrorCode.QUOTA: PeerQuotaExceeded}
_RETRY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


#: a stub of the Deliver method: envelope bytes in, Ack bytes out (a string: grpc's class is
#: generic only in its type stubs)
DeliverStub: TypeAlias = "grpc.UnaryUnaryMultiCallable[bytes, bytes]"


class TlsSettings(Protocol):
    """Where the PEM files of mutual TLS are (``TlsFiles``, or a config's ``network.tls``)."""

    @property
    def cert(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def ca(self) -> str: ...


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for mutual TLS: this party's certificate and key, and the CA of all parties."""
    cert: str
    key: str
    ca: str

    def read(self) -> tuple[bytes, bytes, bytes]:
        try:
            return (Path(self.cert).read_bytes(), Path(self.key).read_bytes(),
                    Path(self.ca).read_bytes())
        except OSError as exc:
            raise TransportError(f"TLS file unreadable: {exc}") from exc


class GrpcTransport:
    """Bytes between parties over gRPC (see the module docstring).

    Args:
        role: this party ("guest" | "host" | "arbiter").
        listen: ``HOST:PORT`` of this party's server (port 0 picks a free one; see ``.address``).
        peers: role -> ``HOST:PORT`` of the other parties (``add_peer`` may add one later).
        job_id: every message carries it; a message of another job is refused.
        tls: ``TlsFiles`` (or an object with cert/key/ca) for mutual TLS; None = plaintext.
        max_message_mb: largest payload sent or accepted.
        timeout_s: default receive timeout, and the deadline of one send (with its retries).
        liveness_s: a peer that answered before and has answered nothing for this long (its
            pings refused or unanswered, two at least) has stopped or is cut off: PeerUnavailable
            for every wait on it, without waiting out the timeout.
        max_queued_mb: bytes (MiB) one peer may have waiting in this party's queues
            (None: 16 x ``max_message_mb``).
        max_queued_messages: messages one peer may have waiting in this party's queues.
        resume: accept a new session from a peer whose earlier session was bound (the job
            resumes after a party restarted); otherwise a second session is a SessionError.
        insecure: allow plaintext (no ``tls``) on addresses off the loopback.
    """

    def __init__(self, role: str, listen: str, peers: dict[str, str], job_id: str,
                 tls: TlsSettings | None = None,
                 max_message_mb: float = 64.0, timeout_s: float = 120.0, *,
                 protocol_version: int = PROTOCOL_VERSION, server_workers: int = 4,
                 liveness_s: float = 5.0, max_queued_mb: float | None = None,
                 max_queued_messages: int = DEFAULT_MAX_QUEUED_MESSAGES, resume: bool = False,
                 insecure: bool = False) -> None:
        if role not in ROLES:
            raise TransportError(f"role must be one of {ROLES}, got {role!r}")
        self.role = role
        self.job_id = str(job_id)
        self.insecure = bool(insecure)
        self._tls = None if tls is None else TlsFiles(tls.cert, tls.key, tls.ca)
        self._check_plaintext("listen address", listen)
        for peer, addr in peers.items():
            self._check_plaintext(f"address of peer {peer}", addr)
        self.peers = dict(peers)
        self.timeout_s = float(timeout_s)
        self.max_bytes = int(max_message_mb * 1024 * 1024)
        queued_mb = 16 * max_message_mb if max_queued_mb is None else max_queued_mb
        self.max_queued_bytes = int(queued_mb * 1024 * 1024)
        self.max_queued_messages = int(max_queued_messages)
        if self.max_queued_messages < 1 or self.max_queued_bytes < 1:
            raise ConfigError(f"{role}: max_queued_messages and max_queued_mb must be positive")
        self.resume = bool(resume)
        self.protocol_version = int(protocol_version)
        #: random per transport: our sending stream's id, and the nonce peers must echo to us
        self.session = secrets.randbits(63) or 1
        self.stats = {"bytes_sent": 0, "bytes_received": 0, "seconds_waiting": 0.0,
                      "seconds_sending": 0.0, "messages_sent": 0, "messages_received": 0,
                      "retries": 0, "duplicates_dropped": 0, "refused": 0}
        self._pem = self._tls.read() if self._tls else None
        self._cond = threading.Condition()
        self._queues: dict[tuple[str, str], deque] = {}
        self._queued: dict[str, list[int]] = {}               # per sender: [bytes, messages]
        self._errors: dict[str, TransportError] = {}         # per sender: why its stream broke
        self._closed_peers: set[str] = set()
        self._last_seq: dict[tuple[str, int], int] = {}       # (sender, session) -> last seq
        self._bound: dict[str, int] = {}                      # sender -> its accepted session
        self._retired: dict[str, set[int]] = {}               # sender -> sessions it resumed from
        self._next_seq: dict[str, int] = {}                   # receiver -> next seq to send
        self._peer_nonce: dict[str, int] = {}                 # receiver -> its session nonce
        self._send_locks: dict[str, threading.Lock] = {}
        self._channels: dict[str, tuple[grpc.Channel, DeliverStub]] = {}
        self._chan_lock = threading.Lock()
        #: a peer that answered before and then answers nothing for ``liveness_s`` has stopped or
        #: is cut off: every wait on it says so instead of waiting out its timeout
        self.liveness_s = float(liveness_s)
        if not self.liveness_s > 0:
            raise ConfigError(f"{role}: liveness_s must be positive, got {liveness_s!r}")
        self._ping_period = self.liveness_s / 4
        self._ping_timeout = max(self._ping_period, min(MIN_PING_TIMEOUT_S, self.liveness_s / 2))
        self._contact: dict[str, float] = {}     # peer -> monotonic time of its latest answer
        self._failed_pings: dict[str, int] = {}  # peer -> pings failed in a row since then
        self._pinging: set[str] = set()          # peers with a ping in flight
        self._closed = False
        self._log_lock = threading.Lock()
        self._log_window = (time.monotonic(), 0, 0)    # (start, logged, suppressed) of refusals
        opts = self._grpc_options()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=server_workers,
                                                              thread_name_prefix=f"unifl-{role}"),
                                   options=opts)
        handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(
            self._deliver)   # raw bytes both ways
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Deliver": handler}),))
        try:
            if self._pem:
                cert, key, ca = self._pem
                creds = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                                    require_client_auth=True)
                port = self._server.add_secure_port(listen, creds)
            else:
                port = self._server.add_insecure_port(listen)
        except RuntimeError as exc:
            raise PeerUnavailable(f"{role}: cannot listen on {listen}: {exc}") from exc
        if not port:
            raise PeerUnavailable(f"{role}: cannot listen on {listen} (address in use?)")
        self.address = f"{listen.rsplit(':', 1)[0]}:{port}"
        self._server.start()
        self._monitor = threading.Thread(target=self._watch_peers, daemon=True,
                                         name=f"unifl-{role}-liveness")
        self._monitor.start()

    @property
    def mutually_authenticated(self) -> bool:
        """True when both ends of every link prove their role with a CA-signed certificate
        (mutual TLS); only then may a secret such as a private key be sent."""
        return self._pem is not None

    # ---- configuration
    def _check_plaintext(self, what: str, address: str) -> None:
        """Plaintext carries no identity and no secrecy: only the loopback may go without TLS."""
        if self._tls is None and not self.insecure and not is_loopback_address(address):
            raise ConfigError(f"{self.role}: {what} {address} is off the loopback and no TLS is "
                              "configured; configure mutual TLS (network.tls) or, knowingly, "
                              "network.insecure: true")

    def _grpc_options(self) -> list[tuple[str, int | str]]:
        limit = self.max_bytes + ENVELOPE_OVERHEAD
        return [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit),
                ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
                ("grpc.initial_reconnect_backoff_ms", min(MAX_RECONNECT_BACKOFF_MS, 200))]

    def add_peer(self, role: str, address: str) -> None:
        """Tell this transport where peer ``role`` listens (before the first message to it)."""
        self._check_plaintext(f"address of peer {role}", address)
        with self._chan_lock:
            if self.peers.get(role) != address:      # a channel to the old address goes
                old = self._channels.pop(role, None)
                if old is not None:
                    old[0].close()
            self.peers[role] = address

    # ---- server side
    def _ack(self, seq: int = 0, **fields: Any) -> bytes:
        return Ack(protocol_version=self.protocol_version, seq=seq, session=self.session,
                   **fields).SerializeToString()

    def _refuse(self, code: ErrorCode, msg: str, sender: str | None = None,
                exc_type: type[TransportError] | None = None) -> bytes:
        """Ack refusing an envelope.  Callers pass ``sender`` only once it is authenticated: such
        a refusal also breaks the receiving side's stream from that peer, so its next recv raises
        instead of waiting."""
        with self._cond:
            self.stats["refused"] += 1
            if sender in self.peers and exc_type is not None:
                self._errors.setdefault(sender, exc_type(msg))
                self._cond.notify_all()
        self._log_refusal(msg)
        return Ack(protocol_version=self.protocol_version, error_code=int(code),
                   error=msg).SerializeToString()

    def _log_refusal(self, msg: str) -> None:
        """Log a refusal, at most ``REFUSAL_LOG_BURST`` per ``REFUSAL_LOG_WINDOW_S``; the rest are
        counted (``stats["refused"]``) and summed up in one line when the next window opens."""
        now = time.monotonic()
        with self._log_lock:
            start, logged, suppressed = self._log_window
            if now - start >= REFUSAL_LOG_WINDOW_S:
                if suppressed:
                    log.warning("%s: %d more refused messages in %.0f s were not logged", self.role,
                                suppressed, now - start)
                start, logged, suppressed = now, 0, 0
            if logged >= REFUSAL_LOG_BURST:
                self._log_window = (start, logged, suppressed + 1)
                return
            self._log_window = (start, logged + 1, suppressed)
        log.warning("%s refused a message: %s", self.role, msg[:1000])

    def _deliver(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            env = Envelope.FromString(raw)
        except Exception:  # noqa: BLE001 - any parse failure is a malformed envelope
            return self._refuse(ErrorCode.MALFORMED,
                                f"{self.role}: unparsable envelope ({len(raw)} bytes)")
        # repr, cut: sender and tag are the peer's bytes (no forged log lines through newlines)
        who = f"{env.sender[:64]!r} -> {self.role} [{env.tag[:128]!r}] seq {env.seq}"
        # 1. authenticate: nothing below may record state for a sender it has not proven to be
        if env.sender not in self.peers:
            return self._refuse(ErrorCode.UNKNOWN_SENDER, f"{who}: sender {env.sender[:64]!r} is not a "
                                f"configured peer of {self.role} ({sorted(self.peers)})")
        if self._pem and not _peer_is(context, env.sender):
            return self._refuse(ErrorCode.IDENTITY, f"{who}: the TLS certificate of the client "
                                f"does not name {env.sender!r}")
        sender = env.sender
        control = env.seq == 0 and env.tag in (PING_TAG, HELLO_TAG)
        if control and env.tag == PING_TAG:     # liveness probe: answered, never queued
            return self._ack()
        # 2. the authenticated sender's stream: a refusal here is its own doing
        if env.protocol_version != self.protocol_version:
            return self._refuse(ErrorCode.VERSION,
                                f"{who}: peer {sender} speaks protocol v{env.protocol_version}, "
                                f"{self.role} speaks v{self.protocol_version}",
                                sender, ProtocolVersionError)
        if env.job_id != self.job_id:
            return self._refuse(ErrorCode.JOB, f"{who}: message of job {env.job_id!r}, but "
                                f"{self.role} runs job {self.job_id!r}", sender,
                                JobMismatchError)
        if env.receiver != self.role:
            return self._refuse(ErrorCode.RECEIVER, f"{who}: addressed to {env.receiver!r}",
                                sender, MalformedMessageError)
        if control:                              # hello: our nonce, which the sender must echo
            return self._ack()
        # 3. freshness: a message must echo this transport's nonce.  One that does not was not
        # written for this run (replayed, or meant for an earlier incarnation of this party); it
        # is refused without a trace, so replaying a recording cannot break a live stream.
        if env.peer_session != self.session:
            why = ("carries no session nonce (no hello first)" if not env.peer_session else
                   "carries the session nonce of another run (a replayed recording, or a peer "
                   f"still talking to an earlier {self.role})")
            return self._refuse(ErrorCode.SESSION, f"{who}: {why}")
        if zlib.crc32(env.payload) != env.crc32:
            return self._refuse(ErrorCode.MALFORMED, f"{who}: payload checksum mismatch "
                                "(corrupted in transit)", sender, MalformedMessageError)
        size = len(env.payload)
        if size > self.max_bytes:
            return self._refuse(ErrorCode.MALFORMED, f"{who}: {size} bytes exceed "
                                f"the limit of {self.max_bytes}", sender, MessageTooLarge)
        key = (sender, env.session)
        with self._cond:
            if self._closed:
                return Ack(protocol_version=self.protocol_version, error_code=ErrorCode.CLOSED,
                           error=f"{self.role} is closed").SerializeToString()
            bound = self._bound.get(sender)
            if bound is not None and env.session != bound:
                retired = self._retired.setdefault(sender, set())
                if env.session in retired:
                    return self._refuse_locked(ErrorCode.SESSION, f"{who}: session {env.session}"
                                               f" of {sender} was replaced by a resumed one")
                if not self.resume:
                    msg = (f"{who}: {sender} opened a second session while its session of this "
                           "run is still bound (a restarted or duplicate party?); a job that "
                           "continues after a restart must say resume: true")
                    return self._refuse_locked(ErrorCode.SESSION, msg, sender, SessionError)
            last = self._last_seq.get(key, 0)
            if env.seq <= last:
                self.stats["duplicates_dropped"] += 1
                return self._ack(env.seq, duplicate=True)
            if env.seq != last + 1:
                msg = (f"{who}: out of order, expected seq {last + 1} from {sender} "
                       "(a message was lost)")
                return self._refuse_locked(ErrorCode.SEQUENCE, msg, sender, SequenceError)
            queued = self._queued.setdefault(sender, [0, 0])
            if env.tag != BYE_TAG and (queued[1] + 1 > self.max_queued_messages
                                       or queued[0] + size > self.max_queued_bytes):
                msg = (f"{who}: {sender} already has {queued[1]} messages ({queued[0]} bytes) "
                       f"waiting at {self.role}; the cap is {self.max_queued_messages} messages "
                       f"and {self.max_queued_bytes} bytes (network.max_queued_messages, "
                       "network.max_queued_mb)")
                return self._refuse_locked(ErrorCode.QUOTA, msg, sender, PeerQuotaExceeded)
            if bound != env.session:             # first session, or an explicit resume
                if bound is not None:
                    self._retired.setdefault(sender, set()).add(bound)
                    self._last_seq.pop((sender, bound), None)
                self._bound[sender] = env.session
            self._last_seq[key] = env.seq
            # a message of its own proves the sender alive (its pings to us do not count: a
            # one-way partition must still end our waits on it)
            self._contact[sender] = time.monotonic()
            self._failed_pings[sender] = 0
            if env.tag == BYE_TAG:
                self._closed_peers.add(sender)
            else:
                self._closed_peers.discard(sender)
                self._queues.setdefault((sender, env.tag), deque()).append(env.payload)
                queued[0] += size
                queued[1] += 1
                self.stats["bytes_received"] += size
                self.stats["messages_received"] += 1
            self._cond.notify_all()
        return self._ack(env.seq)

    def _refuse_locked(self, code: ErrorCode, msg: str, sender: str | None = None,
                       exc_type: type[TransportError] | None = None) -> bytes:
        """``_refuse`` for a caller that holds ``self._cond``."""
        self.stats["refused"] += 1
        if sender is not None and exc_type is not None:
            self._errors.setdefault(sender, exc_type(msg))
            self._cond.notify_all()
        self._log_refusal(msg)
        return Ack(protocol_version=self.protocol_version, error_code=int(code),
                   error=msg).SerializeToString()

    # ---- client side
    def _stub(self, dst: str) -> DeliverStub:
        with self._chan_lock:
            return self._stub_locked(dst)

    def _stub_locked(self, dst: str) -> DeliverStub:
        if dst not in self._channels:
            if self._closed:
                raise TransportError(f"{self.role}: transport closed")
            addr = self.peers.get(dst)
            if addr is None:
                raise TransportError(f"{self.role}: no address for peer {dst!r} "
                                     f"(configured peers: {sorted(self.peers)})")
            opts = self._grpc_options()
            if self._pem:
                cert, key, ca = self._pem
                creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                                     certificate_chain=cert)
                # verify that the server's certificate names the role we mean to reach
                opts = opts + [("grpc.ssl_target_name_override", dst)]
                ch = grpc.secure_channel(addr, creds, options=opts)
            else:
                ch = grpc.insecure_channel(addr, options=opts)
            self._channels[dst] = (ch, ch.unary_unary(DELIVER_METHOD))
        return self._channels[dst][1]

    def send(self, dst: str, tag: str, data: bytes, timeout: float | None = None) -> None:
        """Deliver ``data`` to ``dst`` under ``tag``; returns once ``dst`` has queued it."""
        if self._closed:
            raise TransportError(f"{self.role}: send on a closed transport")
        if dst == self.role or dst not in ROLES:
            raise TransportError(f"{self.role}: cannot send to {dst!r}")
        data = bytes(data)
        if len(data) > self.max_bytes:
            raise MessageTooLarge(f"{self.role} -> {dst} [{tag}]: {len(data)} bytes exceed the "
                                  f"limit of {self.max_bytes} (network.max_message_mb)")
        self._send(dst, tag, data, self.timeout_s if timeout is None else timeout)

    def _send(self, dst: str, tag: str, data: bytes, timeout: float) -> None:
        lock = self._send_locks.setdefault(dst, threading.Lock())
        t0 = time.perf_counter()
        with lock:
            seq = self._next_seq.get(dst, 1)
            stub = self._stub(dst)
            # The seq is used up by this attempt whatever happens: if the message did arrive but
            # its Ack was lost, reusing the seq would make the receiver drop the NEXT message as a
            # "duplicate"; consuming it turns a truly lost message into a SequenceError instead.
            self._next_seq[dst] = seq + 1
            deadline = time.monotonic() + timeout
            nonce = self._peer_nonce.get(dst)
            if nonce is None:        # first message to dst: learn the nonce it wants echoed
                hello = Envelope(protocol_version=self.protocol_version, job_id=self.job_id,
                                 sender=self.role, receiver=dst, tag=HELLO_TAG,
                                 session=self.session, seq=0).SerializeToString()
                ack = self._call(stub, hello, dst, tag, deadline, timeout)
                if not ack.session:
                    raise MalformedMessageError(f"{dst} answered {self.role}'s hello without a "
                                                "session nonce")
                nonce = self._peer_nonce[dst] = ack.session
            env = Envelope(protocol_version=self.protocol_version, job_id=self.job_id,
                           sender=self.role, receiver=dst, tag=tag, session=self.session, seq=seq,
                           payload=data, crc32=zlib.crc32(data),
                           peer_session=nonce).SerializeToString()
            self._call(stub, env, dst, tag, deadline, timeout)
        with self._cond:
            if tag != BYE_TAG:
                self.stats["bytes_sent"] += len(data)
                self.stats["messages_sent"] += 1
            self.stats["seconds_sending"] += time.perf_counter() - t0

    def _call(self, stub: DeliverStub, env: bytes, dst: str, tag: str, deadline: float,
              timeout: float) -> AckMessage:
        """One envelope to ``dst``, retried on transient failures until ``deadline``; its Ack,
        or the refusal it carries raised as the matching named error.  A peer found unavailable
        meanwhile (module docstring) ends the call at once."""
        delay, attempt, last_err = 0.05, 0, "no attempt"
        while True:
            self._raise_if_unavailable(dst, f"sending [{tag}] to {dst}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerUnavailable(
                    f"{self.role} -> {dst} ({self.peers.get(dst)}) [{tag}]: not delivered "
                    f"within {timeout:g} s after {attempt} attempt(s): {last_err}")
            call = stub.future(env, timeout=min(left, max(5.0, timeout / 4)), wait_for_ready=True)
            try:
                while True:
                    try:
                        raw = call.result(timeout=LIVENESS_WAKE_S)
                        break
                    except grpc.FutureTimeoutError:
                        try:
                            self._raise_if_unavailable(dst, f"sending [{tag}] to {dst}")
                        except PeerUnavailable:
                            call.cancel()
                            raise
                break
            except grpc.RpcError as exc:
                code = exc.code()
                last_err = f"{code.name}: {exc.details()}"
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise MessageTooLarge(f"{self.role} -> {dst} [{tag}]: refused by the "
                                          f"peer's size limit ({exc.details()})") from None
                if code not in _RETRY_CODES:
                    raise TransportError(f"{self.role} -> {dst} [{tag}]: {last_err}") from None
                attempt += 1
                with self._cond:
                    self.stats["retries"] += 1
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 1.0)
        self._heard_from(dst)
        ack = _parse_ack(raw, self.role, dst)
        if ack.error_code:
            try:
                exc_type = _CODE_ERRORS.get(ErrorCode(ack.error_code), TransportError)
            except ValueError:      # a code from a newer peer
                exc_type = TransportError
            raise exc_type(f"{dst} refused {self.role}'s message [{tag}]: {ack.error}")
        if ack.protocol_version != self.protocol_version:
            raise ProtocolVersionError(f"{dst} answered with protocol v{ack.protocol_version}, "
                                       f"{self.role} speaks v{self.protocol_version}")
        return ack

    def recv(self, src: str, tag: str, timeout: float | None = None) -> bytes:
        """The next message from ``src`` under ``tag``; waits at most ``timeout`` seconds
        (default: ``timeout_s``), then :class:`PeerTimeout` naming the peer and the tag.  A peer
        that answered before and has answered nothing for ``liveness_s`` (module docstring) is
        :class:`PeerUnavailable` at once, however long the timeout."""
        timeout = self.timeout_s if timeout is None else float(timeout)
        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout
        key = (src, tag)
        try:
            with self._cond:
                while True:
                    q = self._queues.get(key)
                    if q:
                        data = q.popleft()
                        if not q:
                            del self._queues[key]
                        queued = self._queued.get(src)
                        if queued is not None:
                            queued[0] -= len(data)
                            queued[1] -= 1
                        return data
                    if src in self._errors:
                        raise self._errors[src]
                    if src in self._closed_peers:
                        raise PeerClosed(f"{self.role}: waiting for [{tag}] from {src}, but {src} "
                                         "closed its transport (its party stopped)")
                    if self._closed:
                        raise TransportError(f"{self.role}: transport closed while waiting for "
                                             f"[{tag}] from {src}")
                    silent = self._silent_for(src)
                    if silent is not None:
                        raise self._unavailable(src, f"waiting for [{tag}] from {src}", silent)
                    now = time.monotonic()
                    if now >= deadline:
                        raise PeerTimeout(f"{self.role}: no message [{tag}] from {src} "
                                          f"({self.peers.get(src, 'no address')}) within "
                                          f"{timeout:g} s (peer stopped, stuck or unreachable)")
                    self._cond.wait(min(deadline - now, LIVENESS_WAKE_S))
        finally:
            with self._cond:
                self.stats["seconds_waiting"] += time.perf_counter() - t0

    # ---- liveness
    def _heard_from(self, peer: str) -> None:
        """``peer`` answered one of our calls (an Ack): it is alive and reachable now."""
        with self._cond:
            self._contact[peer] = time.monotonic()
            self._failed_pings[peer] = 0

    def _silent_for(self, peer: str) -> float | None:
        """Seconds since ``peer``'s latest answer when that makes it unavailable (it answered
        before, at least two pings in a row failed since, and ``liveness_s`` has passed); else
        None.  Called with ``self._cond`` held."""
        last = self._contact.get(peer)
        if last is None or self._failed_pings.get(peer, 0) < 2:
            return None
        silent = time.monotonic() - last
        return silent if silent >= self.liveness_s else None

    def _unavailable(self, peer: str, doing: str, silent: float) -> PeerUnavailable:
        return PeerUnavailable(
            f"{self.role}: {doing}, but {peer} ({self.peers.get(peer)}) has answered nothing for "
            f"{silent:.1f} s (liveness_s {self.liveness_s:g}: its party stopped or crashed, or "
            "the network between us is partitioned)")

    def _raise_if_unavailable(self, peer: str, doing: str) -> None:
        with self._cond:
            silent = self._silent_for(peer)
        if silent is not None:
            raise self._unavailable(peer, doing, silent)

    def _watch_peers(self) -> None:
        """The liveness thread: a ping to every configured peer every ``liveness_s``/4 s (one at
        a time per peer), until the transport closes."""
        while True:
            with self._cond:
                if self._closed:
                    return
                due = [p for p in self.peers if p not in self._pinging
                       and p not in self._closed_peers]
                self._pinging.update(due)
            for peer in due:
                self._ping(peer)
            next_round = time.monotonic() + self._ping_period
            with self._cond:
                while not self._closed and (left := next_round - time.monotonic()) > 0:
                    self._cond.wait(left)      # woken by every delivery: wait out the period

    def _ping(self, dst: str) -> None:
        """Send a liveness probe to ``dst`` without waiting for it: an answer is contact; a
        refused connection (nothing listens any more) or no answer within the ping timeout
        (frozen process, partitioned network) is a failed ping.  Any answer other than
        "unreachable" or "no answer in time" came from a live process."""
        env = Envelope(protocol_version=self.protocol_version, job_id=self.job_id,
                       sender=self.role, receiver=dst, tag=PING_TAG, session=self.session,
                       seq=0).SerializeToString()

        def done(call: Any) -> None:
            alive: bool | None      # None: nothing to conclude
            try:
                call.result()
                alive = True
            except grpc.RpcError as exc:
                code = exc.code()
                alive = (None if code == grpc.StatusCode.CANCELLED else   # channel replaced
                         code not in (grpc.StatusCode.UNAVAILABLE,
                                      grpc.StatusCode.DEADLINE_EXCEEDED))
            except Exception:  # noqa: BLE001 -- cancelled at close: nothing to conclude
                alive = None
            with self._cond:
                self._pinging.discard(dst)
                if alive:
                    self._contact[dst] = time.monotonic()
                    self._failed_pings[dst] = 0
                elif alive is False:
                    self._failed_pings[dst] = self._failed_pings.get(dst, 0) + 1
                self._cond.notify_all()

        try:
            self._stub(dst).future(env, timeout=self._ping_timeout).add_done_callback(done)
        except (TransportError, ValueError, RuntimeError):
            # no address, or the channel closed under us: nothing to conclude
            with self._cond:
                self._pinging.discard(dst)

    def close(self) -> None:
        """Say goodbye to the peers (best effort), stop the server, close the channels."""
        if self._closed:
            return
        for dst in list(self._channels):
            try:
                self._send(dst, BYE_TAG, b"", 0.5)
            except TransportError:
                pass
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._server.stop(grace=0.2).wait(2.0)
        with self._chan_lock:
            for ch, _ in self._channels.values():
                ch.close()
            self._channels.clear()

    def __enter__(self) -> "GrpcTransport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse_ack(raw: bytes, me: str, dst: str) -> AckMessage:
    try:
        return Ack.FromString(raw)
    except Exception as exc:  # noqa: BLE001
        raise MalformedMessageError(f"{me}: unparsable acknowledgement from {dst}") from exc


def _peer_is(context: grpc.ServicerContext, role: str) -> bool:
    """True when the client's verified TLS certificate names ``role`` (SAN DNS entry or CN)."""
    # gRPC gives an iterable of bytes per auth property; types-grpcio's stub says one bytes value
    auth = cast(Mapping[str, Iterable[bytes]], context.auth_context() or {})
    names = [v.decode() for k in ("x509_subject_alternative_name", "x509_common_name")
             for v in auth.get(k, [])]
    return role in names


def from_config(cfg: PartyConfig, job_id: str, **overrides: Any) -> GrpcTransport:
    """A transport from a :class:`unifl.configs.PartyConfig`'s ``network`` section (``overrides``,
    e.g. ``resume=True`` from the job, replace constructor arguments)."""
    net = cfg.network
    kwargs: dict[str, Any] = dict(
        role=cfg.party, listen=net.listen, peers=dict(net.peers), job_id=job_id, tls=net.tls,
        max_message_mb=net.max_message_mb, timeout_s=net.timeout_s, liveness_s=net.liveness_s,
        max_queued_mb=net.max_queued_mb, max_queued_messages=net.max_queued_messages,
        insecure=net.insecure)
    kwargs.update(overrides)
    return GrpcTransport(**kwargs)
