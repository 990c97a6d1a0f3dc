"""Message passing between parties: the byte-level ``Transport`` contract, an in-process
``LocalTransport`` (threads in one process, for tests and benchmarks) and the object-level ``Channel``.

``Channel`` encodes Python objects with :mod:`unifl.app.codec` (no pickle) and keeps a registry of
Paillier public keys by fingerprint -- every key it sends or receives, plus keys registered by the
party -- so an encrypted array that arrives is decoded under the key its frame names; a ciphertext
under any other key is rejected with :class:`~unifl.core.errors.KeyMismatchError`.

Every transport says whether it is ``mutually_authenticated`` (mutual TLS, or never leaving the
process); one without the attribute counts as not.  A private key crosses only through
:meth:`Channel.send_private_key` / :meth:`Channel.recv_private_key`, and both refuse with
:class:`~unifl.core.errors.InsecureTransportError` on a transport that is not mutually authenticated.
Keys received are held to the channel's ``min_key_bits`` floor (the party's ``key_bits``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Iterable, Protocol, runtime_checkable

from ..core.backend import Backend
from ..core.errors import InsecureTransportError, PeerTimeout, TransportError
from ..core.lru import LruCache
from ..phe_sdk import paillier, rsa
from . import codec

ROLES = ("guest", "host", "arbiter")


@runtime_checkable
class Transport(Protocol):
    """Bytes between named roles.  Messages of one (src, dst) pair with the same tag arrive in
    send order.  ``recv`` raises :class:`PeerTimeout` when nothing arrives within ``timeout``.

    A transport should also say ``mutually_authenticated: bool``: True only when both ends are
    authenticated and the link encrypted (mutual TLS), or the bytes never leave the process.  It is
    read with ``getattr(..., False)`` (not a protocol member, so older transports still satisfy the
    protocol): one without it counts as insecure, and private keys never cross it."""

    role: str
    stats: dict

    def send(self, dst: str, tag: str, data: bytes) -> None: ...

    def recv(self, src: str, tag: str, timeout: float | None = None) -> bytes: ...

    def close(self) -> None: ...


class Messenger(Protocol):
    """What the protocol code needs of a party's link: objects to and from named roles
    (:class:`Channel`, or :class:`unifl.app.overlap.PeerLink` over one)."""

    def send(self, dst: str, tag: str, obj: Any) -> None: ...

    def recv(self, src: str, tag: str, timeout: float | None = None) -> Any: ...


class LocalHub:
    """The shared mailbox of a set of ``LocalTransport`` s: one FIFO per (src, dst, tag)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._boxes: dict[tuple[str, str, str], deque] = {}
        self._closed: set[str] = set()

    def put(self, src: str, dst: str, tag: str, data: bytes) -> None:
        with self._cond:
            if dst in self._closed:
                raise TransportError(f"{src} -> {dst} [{tag}]: {dst} has closed its transport")
            self._boxes.setdefault((src, dst, tag), deque()).append(bytes(data))
            self._cond.notify_all()

    def get(self, src: str, dst: str, tag: str, timeout: float | None) -> bytes:
        deadline = None if timeout is None else time.monotonic() + timeout
        key = (src, dst, tag)
        with self._cond:
            while True:
                box = self._boxes.get(key)
                if box:
                    data = box.popleft()
                    if not box:
                        del self._boxes[key]
                    return data
                if src in self._closed:
                    raise TransportError(f"{dst} waiting for [{tag}] from {src}: {src} has closed "
                                         "its transport (party stopped)")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise PeerTimeout(f"{dst}: no message [{tag}] from {src} within {timeout:g} s")
                self._cond.wait(left)

    def close(self, role: str) -> None:
        with self._cond:
            self._closed.add(role)
            self._cond.notify_all()


class LocalTransport:
    """``Transport`` between threads of one process (tests, single-machine benchmarks).

    ``mutually_authenticated`` is True: the bytes never leave the process's memory, and every
    endpoint is a thread of that process created with its role by the same code, so there is no
    wire to read and no stranger to authenticate (what mutual TLS provides between processes)."""

    mutually_authenticated = True

    def __init__(self, role: str, hub: LocalHub) -> None:
        self.role = role
        self.hub = hub
        self.stats = {"bytes_sent": 0, "bytes_received": 0, "seconds_waiting": 0.0}
        self._lock = threading.Lock()

    def send(self, dst: str, tag: str, data: bytes) -> None:
        self.hub.put(self.role, dst, tag, data)
        with self._lock:
            self.stats["bytes_sent"] += len(data)

    def recv(self, src: str, tag: str, timeout: float | None = None) -> bytes:
        t0 = time.perf_counter()
        try:
            data = self.hub.get(src, self.role, tag, timeout)
        finally:
            with self._lock:
                self.stats["seconds_waiting"] += time.perf_counter() - t0
        with self._lock:
            self.stats["bytes_received"] += len(data)
        return data

    def close(self) -> None:
        self.hub.close(self.role)


def local_transports(roles: Iterable[str] = ("guest", "host")) -> dict[str, LocalTransport]:
    """Connected LocalTransports, one per role."""
    hub = LocalHub()
    return {r: LocalTransport(r, hub) for r in roles}


#: public keys a channel accepts ciphertexts under, most recently used kept: a protocol uses two
#: or three, and a peer that sends a key of a new modulus in every message must not grow this
#: party's memory without bound (a ciphertext under a dropped key is refused, never misread)
MAX_KEYS = 64


class Channel:
    """Objects between parties over a ``Transport`` (see the module docstring)."""

    def __init__(self, transport: Transport, default_timeout: float = 120.0,
                 backend: Backend | None = None, min_key_bits: int | None = None) -> None:
        self.transport = transport
        #: the party's key_bits floor: any key received below it is refused (WeakKeyError) before
        #: a key object is built
        self.min_key_bits = min_key_bits
        self.role: str = transport.role
        self.default_timeout = default_timeout
        #: backend decoded encrypted arrays compute on (a party sets its own)
        self.backend = backend
        self._keys: LruCache[bytes, paillier.PublicKey] = LruCache(MAX_KEYS)
        self.codec_seconds = 0.0

    # ---- key registry
    def register_key(self, key: paillier.PublicKey) -> None:
        """Accept ciphertexts under ``key`` from now on (while it is among the :data:`MAX_KEYS`
        most recently used)."""
        self._keys.put(codec.fingerprint16(key), key)

    def known_key(self, fp: bytes) -> paillier.PublicKey | None:
        return self._keys.get(bytes(fp))

    # ---- objects
    def send(self, dst: str, tag: str, obj: Any) -> None:
        t0 = time.perf_counter()
        self._register_keys_in(obj)
        data = codec.encode(obj)
        self.codec_seconds += time.perf_counter() - t0
        self.transport.send(dst, tag, data)

    def recv(self, src: str, tag: str, timeout: float | None = None) -> Any:
        data = self.transport.recv(src, tag, self.default_timeout if timeout is None else timeout)
        t0 = time.perf_counter()
        try:
            return codec.decode(data, self.known_key, on_key=self.register_key,
                                backend=self.backend, min_key_bits=self.min_key_bits)
        finally:
            self.codec_seconds += time.perf_counter() - t0

    # ---- private keys: only over a mutually authenticated transport
    @property
    def mutually_authenticated(self) -> bool:
        """Whether the transport is mutually authenticated TLS (or in-process)."""
        return getattr(self.transport, "mutually_authenticated", False) is True

    def _require_mutual_auth(self, what: str) -> None:
        if not self.mutually_authenticated:
            raise InsecureTransportError(
                f"{self.role}: refusing to {what}: the transport "
                f"({type(self.transport).__name__}) is not mutually authenticated TLS; configure "
                "network.tls (cert, key, ca) for every party")

    def send_private_key(self, dst: str, tag: str,
                         key: "paillier.PrivateKey | rsa.PrivateKey") -> None:
        """Send a private key to ``dst``; refused unless the transport is mutually authenticated.

        Raises:
            InsecureTransportError: the transport is not mutual TLS (nothing is sent).
        """
        self._require_mutual_auth(f"send a private key to {dst} [{tag}]")
        data = codec.encode_private_key(key)
        self.transport.send(dst, tag, data)

    def recv_private_key(self, src: str, tag: str, timeout: float | None = None
                         ) -> "paillier.PrivateKey | rsa.PrivateKey":
        """Receive a private key from ``src`` (held to ``min_key_bits``); refused unless the
        transport is mutually authenticated.

        Raises:
            InsecureTransportError: the transport is not mutual TLS (nothing is read).
            SerializationError: the message is not a private key.
        """
        self._require_mutual_auth(f"receive a private key from {src} [{tag}]")
        data = self.transport.recv(src, tag, self.default_timeout if timeout is None else timeout)
        return codec.decode(data, None, backend=self.backend, min_key_bits=self.min_key_bits,
                            allow_private_key=True)

    def _register_keys_in(self, obj: Any) -> None:
        if isinstance(obj, paillier.PublicKey):
            self.register_key(obj)
        elif isinstance(obj, (list, tuple)):
            for x in obj:
                self._register_keys_in(x)
        elif isinstance(obj, dict):
            for x in obj.values():
                self._register_keys_in(x)

    @property
    def stats(self) -> dict:
        return {**self.transport.stats, "codec_seconds": self.codec_seconds}

    def close(self) -> None:
        self.transport.close()
