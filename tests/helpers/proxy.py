"""A loopback TCP relay that can cut a link without killing either end (a network partition)."""

from __future__ import annotations

import socket
import threading


class PausableProxy:
    """TCP relay on the loopback; ``partition()`` holds every byte in both directions (the peer
    process stays alive, connections stay open, nothing gets through), ``heal()`` lets them go."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._up = (host, int(port))
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.2)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            try:
                upstream = socket.create_connection(self._up, timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                break
            if not data:
                break
            self._flowing.wait()          # partitioned: bytes wait, as on a dead link
            if self._closed:
                break
            try:
                b.sendall(data)
            except OSError:
                break
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def partition(self) -> None:
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self._listener.close()
        with self._lock:
            for s in self._socks:
                s.close()
