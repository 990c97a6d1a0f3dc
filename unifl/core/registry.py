"""Backends registered by name: every folder of ``unifl/backends/`` (found, not listed) and every
plug-in of the ``unifl.backends`` entry point group.  ``unifl.backend(name)`` returns one or raises
BackendUnavailable.

A plug-in is a package of its own that declares, in its distribution's metadata::

    [project.entry-points."unifl.backends"]
    mycard = "mycard_unifl:MycardBackend"

Plug-ins are found on first use (``names()``, ``backend_class()``) and imported only when their
class is needed, so a broken plug-in never breaks ``import unifl``: it probes unavailable with the
import error as its reason.  A plug-in may not take the name of a built-in backend (nor two plug-ins
one name): it is refused, logged, and listed by :func:`refused`, and the built-in keeps the name.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import pkgutil
import re
import threading
from typing import Any

from .errors import BackendUnavailable
from .backend import OPS, Backend, ProbeResult
from .options import BackendOptions

__all__ = ["ENTRY_POINT_GROUP", "DEFAULT_CHAIN", "register", "names", "backend_class", "options_model", "probe",
           "available", "backend", "default_backend", "refresh_plugins", "refused"]

log = logging.getLogger("unifl.registry")

#: the entry point group other distributions register backends in
ENTRY_POINT_GROUP = "unifl.backends"
#: the backends that need no special hardware, fastest first: the default backend, and the default
#: backend and fallback chain of a party config
DEFAULT_CHAIN = ("native", "cpu")
#: a backend name is also a YAML section key and appears in reports: a lowercase identifier
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _discover() -> dict[str, str]:
    """Every folder ``unifl/backends/<name>/`` is a backend whose class is ``<Name>Backend``.

    Adding a backend means adding a folder; nothing here is edited.  Modules are imported lazily (on
    first probe), so a missing driver or toolkit never breaks ``import unifl``.
    """
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "backends")
    found = {}
    for info in pkgutil.iter_modules([here]):
        if info.ispkg and not info.name.startswith("_"):
            found[info.name] = f"unifl.backends.{info.name}:{info.name.capitalize()}Backend"
    return found


# name -> "module:Class"
_BUILTIN: dict[str, str] = _discover()
_classes: dict[str, type[Backend]] = {}
_probes: dict[str, ProbeResult] = {}
_instances: dict[str, Backend] = {}
_lock = threading.Lock()
#: names given a class by ``register()`` (kept when the plug-ins are looked up again)
_explicit: set[str] = set()
#: plug-ins of the entry point group (None: not looked up yet) and those refused, with the reason
_plugins: dict[str, importlib.metadata.EntryPoint] | None = None
_refused: dict[str, str] = {}
# separate from _lock: backend() holds _lock while the lookup below may run for the first time
_plugin_lock = threading.Lock()


def register(name: str, target: str | type[Backend]) -> None:
    """Register a backend class (or a lazy ``"module:Class"`` path) under ``name``."""
    with _lock:
        if isinstance(target, str):
            _BUILTIN[name] = target
            _classes.pop(name, None)
            _explicit.discard(name)
        else:
            _check_class(target)
            _classes[name] = target
            _explicit.add(name)
        _probes.pop(name, None)
        _instances.pop(name, None)


def _check_class(cls: type[Backend]) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"{cls!r} is not a subclass of unifl.core.backend.Backend")
    unknown = set(cls.native_ops) - set(OPS)
    if unknown:
        raise TypeError(f"backend {cls.name}: unknown native ops {sorted(unknown)}")
    if "mont_mul" not in cls.native_ops:
        raise TypeError(f"backend {cls.name}: must implement the base op mont_mul natively")
    missing = [op for op in cls.native_ops if not callable(getattr(cls, f"op_{op}", None))]
    if missing:
        raise TypeError(f"backend {cls.name}: declares {missing} native but has no op_<name> method")
    model = getattr(cls, "options_model", None)
    if not (isinstance(model, type) and issubclass(model, BackendOptions)):
        raise TypeError(f"backend {cls.name}: options_model must be a BackendOptions subclass, "
                        f"got {model!r}")


# ---- plug-ins ---------------------------------------------------------------------------------
def _where(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{ep.value!r} of distribution {dist.name!r}" if dist is not None else repr(ep.value)


def _plugin_entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The accepted plug-ins by name, looked up once (``refresh_plugins`` looks again)."""
    global _plugins
    found = _plugins
    if found is not None:
        return found
    with _plugin_lock:
        if _plugins is not None:
            return _plugins
        claims: dict[str, list[importlib.metadata.EntryPoint]] = {}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            same = claims.setdefault(ep.name, [])
            if all(other.value != ep.value for other in same):   # one dist seen twice on the path
                same.append(ep)
        accepted: dict[str, importlib.metadata.EntryPoint] = {}
        refused: dict[str, str] = {}
        for name, eps in sorted(claims.items()):
            wheres = ", ".join(_where(ep) for ep in eps)
            if name in _BUILTIN:
                refused[name] = (f"plug-in {wheres} claims the name of the built-in backend "
                                 f"{name!r}; the built-in keeps it")
            elif len(eps) > 1:
                refused[name] = f"plug-ins {wheres} all claim the backend name {name!r}"
            elif not _NAME.match(name):
                refused[name] = (f"plug-in {wheres}: backend name {name!r} is not a lowercase "
                                 "identifier ([a-z][a-z0-9_]*)")
            else:
                accepted[name] = eps[0]
        for reason in refused.values():
            log.warning("backend plug-in refused: %s", reason)
        _refused.clear()
        _refused.update(refused)
        _plugins = accepted
        return accepted


def refresh_plugins() -> None:
    """Forget the plug-ins found so far (and their classes, probes and instances) and look them up
    again on next use: after a plug-in is installed into a running process, and in tests."""
    global _plugins
    importlib.invalidate_caches()          # the metadata finder caches directory listings
    with _lock, _plugin_lock:       # the order backend() takes them in
        stale = set(_plugins or ()) | set(_refused)
        for name in stale - set(_BUILTIN) - _explicit:
            _classes.pop(name, None)
            _probes.pop(name, None)
            _instances.pop(name, None)
        _plugins = None
        _refused.clear()


def refused() -> dict[str, str]:
    """Plug-ins that were not registered, by name, with the reason (a name taken by a built-in or
    by another plug-in, a name that is not a lowercase identifier)."""
    _plugin_entry_points()
    return dict(_refused)


def _load_plugin(name: str, ep: importlib.metadata.EntryPoint) -> type[Backend]:
    try:
        cls = ep.load()
    except Exception as exc:  # noqa: BLE001 - any failure of foreign code: the plug-in is unusable
        raise BackendUnavailable(f"backend plug-in {name!r} ({_where(ep)}) cannot be imported: "
                                 f"{type(exc).__name__}: {exc}") from exc
    try:
        _check_class(cls)
    except TypeError as exc:
        raise BackendUnavailable(f"backend plug-in {name!r} ({_where(ep)}) is not a valid "
                                 f"backend: {exc}") from exc
    if cls.name != name:
        raise BackendUnavailable(f"backend plug-in {name!r} ({_where(ep)}): its class is named "
                                 f"{cls.name!r}; the entry point and the class must agree")
    return cls


# ---- lookup -----------------------------------------------------------------------------------
def names() -> list[str]:
    """All registered backend names (available or not): built-in folders, plug-ins, registered."""
    return sorted(set(_BUILTIN) | set(_classes) | set(_plugin_entry_points()))


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``, imported on first use; BackendUnavailable when the name is
    unknown or its module cannot be imported (a missing extension, a broken plug-in)."""
    if name in _classes:
        return _classes[name]
    if name in _BUILTIN:
        mod, _, cls_name = _BUILTIN[name].partition(":")
        try:
            cls = getattr(importlib.import_module(mod), cls_name)
        except ImportError as exc:  # e.g. the native extension was not built
            raise BackendUnavailable(f"backend {name!r} cannot be imported: {exc}") from exc
        _check_class(cls)
    else:
        ep = _plugin_entry_points().get(name)
        if ep is None:
            why = f" ({_refused[name]})" if name in _refused else ""
            raise BackendUnavailable(f"unknown backend {name!r}{why}; registered: "
                                     f"{', '.join(names())}")
        cls = _load_plugin(name, ep)
    _classes[name] = cls
    return cls


def options_model(name: str) -> type[BackendOptions]:
    """The options model of backend ``name`` (what its YAML section and constructor take)."""
    return backend_class(name).options_model


def probe(name: str) -> ProbeResult:
    """Cached probe of backend ``name``: available or not, with the reason and devices."""
    if name not in _probes:
        try:
            _probes[name] = backend_class(name).probe()
        except BackendUnavailable as exc:
            _probes[name] = ProbeResult(False, str(exc), remedy=exc.remedy)
    return _probes[name]


def available() -> list[str]:
    """Names of the backends that probe available here."""
    return [n for n in names() if probe(n).available]


def backend(name: str | None = None, **options: Any) -> Backend:
    """The backend called ``name`` (shared instance; a new one when options are given), or with no
    name the default: the fastest backend that needs no special hardware (native if built, else
    cpu).  Options are checked by the backend's model before anything else, so an unknown or bad
    option is a ConfigError naming it even where the backend is unavailable; an unavailable
    backend is BackendUnavailable with the probe's reason."""
    if name is None:
        if options:
            raise BackendUnavailable("options need a backend name")
        return default_backend()
    if options:
        return _create(name, options)
    with _lock:
        if name not in _instances:
            _instances[name] = _create(name, {})
        return _instances[name]


def _create(name: str, options: dict) -> Backend:
    pr = probe(name)
    try:
        model: type[BackendOptions] | None = options_model(name)
    except BackendUnavailable:      # cannot be imported: the probe says why
        model = None
    if model is not None:           # a bad option is the caller's mistake even where it cannot run
        model.parse(options, backend=name)
    if not pr.available:
        raise BackendUnavailable(f"backend {name!r} is unavailable: {pr.reason}")
    inst = backend_class(name)(**options)
    inst.probe_result = pr
    return inst


def default_backend() -> Backend:
    """The fastest backend that needs no special hardware: the first of ``DEFAULT_CHAIN`` that
    probes available (native if built, else cpu)."""
    for name in DEFAULT_CHAIN:
        if probe(name).available:
            return backend(name)
    raise BackendUnavailable(f"none of the default backends {', '.join(DEFAULT_CHAIN)} is "
                             "available")
