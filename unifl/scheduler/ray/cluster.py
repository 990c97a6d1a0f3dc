"""This process's connection to the party's Ray cluster: joined (or started) once, shared by every
Ray backend of the process, closed when the last one closes.

A party is one Ray *driver* of its own cluster.  Ray lets a process be the driver of one cluster at
a time, so a second config naming another cluster is a ConfigError, never a silent reuse of the
first.  Connecting is bounded in time: an address where nothing listens fails within the party's
``start_timeout_s`` (a TCP probe of the head's GCS port first, then ``ray.init`` in a thread), with
the address and the reason.

Ray's usage statistics are off unless the party's environment says otherwise
(``RAY_USAGE_STATS_ENABLED``): a bank's cluster should not report to anyone by default.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ...core.errors import BackendUnavailable, ConfigError

log = logging.getLogger("unifl.scheduler.ray")

#: the tested Ray release (``pip install 'unifl[ray]'`` pins it)
RAY_VERSION = "2.60.0"


#: Ray's own TLS switch and files (read by every Ray process of the cluster from its environment)
TLS_VARIABLES = {"cert": "RAY_TLS_SERVER_CERT", "key": "RAY_TLS_SERVER_KEY", "ca": "RAY_TLS_CA_CERT"}


def tls_environment(section: Any) -> dict[str, str]:
    """The environment that turns Ray's TLS on for ``section.tls`` (cert, key, ca files, each
    checked readable): ``RAY_USE_TLS=1`` and the three file variables.  ConfigError naming the
    field of a file that cannot be read."""
    tls = section.tls
    env = {"RAY_USE_TLS": "1"}
    for field_name, var in TLS_VARIABLES.items():
        path = str(getattr(tls, field_name))
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise ConfigError(f"ray.tls.{field_name} {path!r} cannot be read: {exc}") from None
        env[var] = path
    return env


def use_tls(section: Any) -> None:
    """Turn Ray's TLS on in this process for ``section.tls`` before it joins a cluster; a process
    that already joined one without TLS cannot switch (ConfigError)."""
    env = tls_environment(section)
    if "ray" in sys.modules and sys.modules["ray"].is_initialized() and any(
            os.environ.get(k) != v for k, v in env.items()):
        raise ConfigError("ray.tls: this process already joined a Ray cluster without these TLS "
                          "settings; start the party in a fresh process")
    os.environ.update(env)


def import_ray() -> ModuleType:
    """The ``ray`` module, or BackendUnavailable saying how to install it."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as exc:
        raise BackendUnavailable(f"executor: ray needs Ray, which is not installed here ({exc}); "
                                 f"pip install 'unifl[ray]' (ray=={RAY_VERSION})") from None
    return ray


@dataclass
class Connection:
    """What this process is connected to: ``address`` as the config said it (None: a local
    instance started here), the GCS address Ray reports, and how many backends use it."""

    address: str | None
    gcs_address: str
    owned: bool                  # True when this module called ray.init (and so may shut it down)
    users: int = 0
    #: set when the connection ends: lets the thread that started a local instance finish
    keep: threading.Event | None = None


_current: Connection | None = None
_guard = threading.Lock()


def _probe(address: str, timeout: float) -> None:
    """ConfigError unless something accepts TCP connections at ``HOST:PORT`` within ``timeout``."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError(f"ray.address {address}: no Ray cluster answers there "
                          f"({type(exc).__name__}: {exc}); on the party's head node run "
                          f"`ray start --head --port={port}` and let the workers join it") from None


class _NoSignalHandlerNote(logging.Filter):
    """Drops Ray's note that it installs no SIGTERM handler off the main thread: the party's own
    shutdown closes the connection (release), so the note would only alarm."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


logging.getLogger("ray._private.worker").addFilter(_NoSignalHandlerNote())


def _init_bounded(ray: ModuleType, timeout: float, where: str, keep: threading.Event | None,
                  **kwargs: Any) -> None:
    """``ray.init(**kwargs)`` given at most ``timeout`` seconds (in a thread: Ray's own wait for an
    unresponsive GCS has no bound we can set); ConfigError naming ``where``.

    ``keep``: for a local instance, the thread stays until the event is set.  Ray starts the
    instance's processes (GCS, raylet, workers) with a parent-death signal, which Linux delivers
    when the *thread* that started them ends -- so that thread must live as long as the instance."""
    box: dict[str, BaseException] = {}
    done = threading.Event()

    def go() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["exc"] = exc
        done.set()
        if keep is not None and "exc" not in box:
            keep.wait()
    t = threading.Thread(target=go, name="unifl-ray-init", daemon=True)
    t.start()
    if not done.wait(timeout):
        raise ConfigError(f"ray.address {where}: no answer from a Ray cluster within {timeout:g} s "
                          "(ray.start_timeout_s)")
    exc = box.get("exc")
    if isinstance(exc, (ConnectionError, RuntimeError, ValueError, OSError)):
        raise ConfigError(f"ray.address {where}: cannot join a Ray cluster there: "
                          f"{type(exc).__name__}: {exc}") from None
    if exc is not None:
        raise exc


#: Ray reads it once, at import: "0" makes a node bind 127.0.0.1 instead of the machine's routable
#: address (Ray's own switch, named for the platforms where that is its default)
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _loopback_only() -> None:
    """A local instance (``address: null``) serves this process alone, so its GCS, raylet and
    workers listen on the loopback only -- unless Ray was imported before with another setting,
    which is then said."""
    if "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_SWITCH, "0")
    if os.environ.get(LOOPBACK_SWITCH) != "0":
        log.warning("ray.address null: Ray was imported before UniFL could keep its local instance "
                    "on the loopback (set %s=0 before importing ray); it listens on this "
                    "machine's network address", LOOPBACK_SWITCH)


def connect(address: str | None, timeout: float) -> Connection:
    """Join the party's cluster at ``address`` (``"auto"``, ``HOST:PORT``) or start a local Ray
    instance (None); reuse the connection this process already has to the same cluster.

    Raises:
        BackendUnavailable: Ray is not installed.
        ConfigError: nothing answers at the address within ``timeout`` seconds, or this process
            is already the driver of another cluster.
    """
    global _current
    if address is None:
        _loopback_only()
    ray = import_ray()
    with _guard:
        cur = _current
        if cur is None and ray.is_initialized():
            # the embedding program connected before us: use its cluster, never shut it down
            cur = Connection(address=address, gcs_address=_gcs(ray), owned=False)
        if cur is not None and ray.is_initialized():
            same = (address == cur.address or address == "auto"
                    or (address is not None and address == cur.gcs_address))
            if not same:
                raise ConfigError(
                    f"ray.address {address or 'null (a local instance)'}: this process is already "
                    f"the driver of the Ray cluster at {cur.gcs_address}; a process belongs to "
                    "one cluster, and each party has its own")
            cur.users += 1
            _current = cur
            return cur
        common: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False,
                                  "namespace": "unifl"}
        keep = threading.Event() if address is None else None
        if address is None:
            # "local": a new instance, never one found on this machine (ray.init with no address
            # would join the cluster `ray start` or another program last started here)
            _init_bounded(ray, timeout, "null (a local instance)", keep, address="local",
                          include_dashboard=False, **common)
        elif address == "auto":
            _init_bounded(ray, timeout, "auto", None, address="auto", **common)
        else:
            _probe(address, min(timeout, 10.0))
            _init_bounded(ray, timeout, address, None, address=address, **common)
        _current = Connection(address=address, gcs_address=_gcs(ray), owned=True, users=1,
                              keep=keep)
        log.info("joined the Ray cluster at %s", _current.gcs_address)
        return _current


def release(conn: Connection) -> None:
    """One backend less on ``conn``; the last one disconnects (a local instance stops)."""
    global _current
    with _guard:
        conn.users -= 1
        if conn.users > 0 or _current is not conn:
            return
        _current = None
        if conn.owned:
            import_ray().shutdown()
        if conn.keep is not None:
            conn.keep.set()


def _gcs(ray: ModuleType) -> str:
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - for messages only
        return "?"
