"""Backends registered by name: every folder of ``unifl/backends/`` (found, not listed) and every
plug-in of the ``unifl.backends`` entry point group.  ``unifl.backend(name)`` returns one or raises
BackendUnavailable."""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from typing import Any, Callable

from .errors import BackendUnavailable
from .backend import OPS, Backend, ProbeResult


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


def register(name: str, target: str | type[Backend]) -> None:
    """Register a backend class (or a lazy ``"module:Class"`` path) under ``name``."""
    with _lock:
        if isinstance(target, str):
            _BUILTIN[name] = target
            _classes.pop(name, None)
        else:
            _check_class(target)
            _classes[name] = target
        _probes.pop(name, None)
        _instances.pop(name, None)


def _check_class(cls: type[Backend]) -> None:
    unknown = set(cls.native_ops) - set(OPS)
    if unknown:
        raise TypeError(f"backend {cls.name}: unknown native ops {sorted(unknown)}")
    if "mont_mul" not in cls.native_ops:
        raise TypeError(f"backend {cls.name}: must implement the base op mont_mul natively")
    missing = [op for op in cls.native_ops if not callable(getattr(cls, f"op_{op}", None))]
    if missing:
        raise TypeError(f"backend {cls.name}: declares {missing} native but has no op_<name> method")


def names() -> list[str]:
    """All registered backend names (available or not)."""
    return sorted(set(_BUILTIN) | set(_classes))


def backend_class(name: str) -> type[Backend]:
    if name in _classes:
        return _classes[name]
    if name not in _BUILTIN:
        raise BackendUnavailable(f"unknown backend {name!r}; registered: {', '.join(names())}")
    mod, _, cls_name = _BUILTIN[name].partition(":")
    try:
        cls = getattr(importlib.import_module(mod), cls_name)
    except ImportError as exc:  # e.g. the native extension was not built
        raise BackendUnavailable(f"backend {name!r} cannot be imported: {exc}") from exc
    _check_class(cls)
    _classes[name] = cls
    return cls


def probe(name: str) -> ProbeResult:
    """Cached probe of backend ``name``: available or not, with the reason and devices."""
    if name not in _probes:
        try:
            _probes[name] = backend_class(name).probe()
        except BackendUnavailable as exc:
            _probes[name] = ProbeResult(False, str(exc))
    return _probes[name]


def available() -> list[str]:
    """Names of the backends that probe available here."""
    return [n for n in names() if probe(n).available]


def backend(name: str | None = None, **options: Any) -> Backend:
    """The backend called ``name`` (shared instance; a new one when options are given), or with no
    name the default: the fastest backend that needs no special hardware (native if built, else
    cpu).  Raises BackendUnavailable with the probe's reason, ConfigError for an unknown option."""
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
    if not pr.available:
        raise BackendUnavailable(f"backend {name!r} is unavailable: {pr.reason}")
    inst = backend_class(name)(**options)
    inst.probe_result = pr
    return inst


def default_backend() -> Backend:
    """The fastest backend that needs no special hardware: native if built, else cpu."""
    for name in ("native", "cpu"):
        if probe(name).available:
            return backend(name)
    raise BackendUnavailable("neither the native nor the cpu backend is available")


