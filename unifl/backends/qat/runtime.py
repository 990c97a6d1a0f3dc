"""Which QAT library to load, and the one driver session per process that uses it.

qatlib starts one user-space process per ``icp_sal_userStart``, so the driver keeps one
:class:`_qat.Session` per process, shared by every ``QatBackend`` instance and opened lazily; a
backend that finds it closed (after :func:`close`) opens a fresh one, which also re-reads the
simulator's ``UNIFL_QAT_SIM_*`` environment.

Library resolution, first match wins:

1. the ``library`` option (``qat.library`` in a party YAML) or ``UNIFL_QAT_LIBRARY``: a path or
   soname of the QAT library, or ``"simulator"`` for ours;
2. the sonames of a real installation (:data:`REAL_QAT_NAMES`), newest first: qatlib (4xxx and
   newer) installs ``libqat.so.4`` from 23.08 on, ``libqat.so.3`` in 22.07 -- 23.02, ``libqat.so.2``
   in 21.08 / 21.11 and ``libqat.so.0`` in 20.08 -- 21.05 (libtool ``-version-info`` of its
   configure.ac), and ``libqat.so`` only with its development symlink; then ``libqat_s.so``, the QAT
   1.x driver package of the 8970 (and qatlib built with ``--enable-legacy-lib-names``).  Each comes
   with its USDM memory driver (:func:`usdm_names_for`): ``libusdm.so.0`` / ``libusdm.so`` for
   qatlib, ``libusdm_drv_s.so`` for ``libqat_s.so`` (``UNIFL_QAT_USDM_LIBRARY`` overrides).  USDM is
   loaded RTLD_GLOBAL before its QAT library is probed: ``libqat_s.so`` takes the qaeMem* functions
   from the global scope and does not load otherwise;
3. our simulator library shipped in this package (``libqat_sim*.so``), unless ``simulator=False``
   or ``UNIFL_QAT_SIMULATOR=0``.

The driver loads the QAT library (and our simulator) RTLD_LOCAL and reaches it through dlsym only,
so the simulator's qaeMem*/icp_sal_* never enter the global scope; and one process runs either the
simulator or a real library, never both: the second kind is refused with BackendUnavailable.

Instances without the large-number API (symmetric-only ones, which ``cpaCyGetNumInstances`` counts
too) are left out (``info()["skipped_instances"]``); a session with none left is refused.  A size
class the library refuses (older libraries: 8192 bits) is sent to the CPU for the rest of the
session: ``stats()["class_fallbacks"]``, :meth:`Session.cpu_size_classes`, and one
:class:`QatSizeClassWarning` (also logged) per class.

Failures are typed.  A session that cannot be opened (no library, no instance, the configuration
section refused) is :class:`~unifl.core.errors.BackendUnavailable`: QAT cannot run here.  A driver
call on an open session that fails -- a submission refused because the session was closed under it
(:class:`QatSessionClosed`), pinned memory that cannot be allocated -- is :class:`QatError`, a
:class:`~unifl.core.errors.DeviceError` naming the library, the configuration section and the call,
which the scheduler's fallback chain takes over.  A single request the device fails is not an
error here: the pipeline recomputes it on the CPU (``unifl.backends.qat.pipeline``).
"""

from __future__ import annotations

import atexit
import ctypes
import glob
import logging
import os
import threading
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ...core.errors import BackendUnavailable, DeviceError

try:
    from . import _qat     # the compiled driver (src/qat_driver.cpp), typed by _qat.pyi
except ImportError as exc:  # extension not built: BUILT says so, IMPORT_ERROR why
    BUILT = False
    IMPORT_ERROR = str(exc)
else:
    BUILT = True
    IMPORT_ERROR = ""

#: the driver's flag of a request the device failed (its caller recomputes it on the CPU); -1, no
#: flag at all, when the driver extension is not built (and the backend cannot start)
FAILED: int = int(_qat.FAILED) if BUILT else -1

#: qatlib's sonames, newest first (libqat.so: the development symlink, not always installed)
QATLIB_NAMES = ("libqat.so.4", "libqat.so.3", "libqat.so.2", "libqat.so.0", "libqat.so")
#: qatlib's USDM (its soname has been .so.0 in every release)
QATLIB_USDM_NAMES = ("libusdm.so.0", "libusdm.so")
#: the QAT 1.x driver package (QAT.L.4.x, for the 8970 and other QAT 1.x devices)
QAT1X_NAMES = ("libqat_s.so",)
QAT1X_USDM_NAMES = ("libusdm_drv_s.so",)
REAL_QAT_NAMES = QATLIB_NAMES + QAT1X_NAMES
REAL_USDM_NAMES = QATLIB_USDM_NAMES + QAT1X_USDM_NAMES
SIMULATOR_WORDS = ("sim", "simulator")
SIMULATOR_LABEL = "QAT simulator"

_lock = threading.Lock()
_session: "Session | None" = None     # the live session
#: (qat candidates, usdm candidates, section) the live session was opened with
_session_key: tuple[tuple[str, ...], tuple[str, ...], str] | None = None
_real_cache: dict[str, tuple[str, tuple[str, ...]] | None] = {}

log = logging.getLogger("unifl.backends.qat")

#: ``load(path_or_soname, mode)``: dlopen, raising OSError when the library does not load
Loader = Callable[[str, int], object]


def _dlopen(name: str, mode: int) -> object:
    return ctypes.CDLL(name, mode=mode)


class QatError(DeviceError):
    """A QAT driver call on an open session failed; the message names the library, the
    configuration section and the call, with the driver's own message (chained as ``__cause__``)."""


class QatSessionClosed(QatError):
    """A request was submitted to a session that had been closed (``close()``, or at exit)."""


class QatSizeClassWarning(RuntimeWarning):
    """The QAT library refused an operand size class (older libraries: 8192 bits): that class is
    computed on the CPU for the rest of the session.  Issued once per class and session."""


class Session:
    """The process's driver session (``_qat.Session``) with its failures typed (:class:`QatError`).

    ``start`` submits a batch of ModExps asynchronously and returns the driver's job (its
    ``wait_landed`` / ``rows`` / ``result`` / ``join`` are read-outs of host memory that raise only
    on a caller's wrong index); ``stats``, ``info``, ``closed``, ``close`` as the driver's."""

    def __init__(self, raw: _qat.Session, qat_names: list[str], section: str) -> None:
        self._raw = raw
        kind = SIMULATOR_LABEL if raw.info()["simulator"] else "QAT"
        self._where = f"{kind} ({qat_names[0] if qat_names else '?'}, section [{section}])"
        self._warned: set[int] = set()
        self._warn_lock = threading.Lock()

    def start(self, base: np.ndarray, exps: np.ndarray, mod: np.ndarray, max_in_flight: int = 96,
              instances: int = 0) -> _qat.Job:
        """Submit base^e mod m for every row (the driver's ``cpaCyLnModExp`` per row, from its
        submitter thread).  QatSessionClosed when the session was closed; QatError when the driver
        refuses the batch (pinned memory for the in-flight window cannot be allocated)."""
        try:
            return self._raw.start(base, exps, mod, max_in_flight, instances)
        except RuntimeError as exc:
            if self._raw.closed:
                raise QatSessionClosed(f"{self._where}: cpaCyLnModExp submission refused: the "
                                       f"session is closed ({exc})") from exc
            raise QatError(f"{self._where}: cpaCyLnModExp submission failed: {exc}") from exc
        except MemoryError as exc:
            raise QatError(f"{self._where}: cpaCyLnModExp submission failed: out of memory "
                           f"({exc})") from exc

    @property
    def closed(self) -> bool:
        return bool(self._raw.closed)

    @property
    def num_instances(self) -> int:
        return int(self._raw.num_instances)

    def info(self) -> dict[str, Any]:
        """Library, USDM library, simulator flag, section and the instances' descriptions."""
        return dict(self._raw.info())

    def stats(self) -> dict[str, float]:
        """The driver's counters (see ``QatBackend.stats``)."""
        return dict(self._raw.stats())

    def cpu_size_classes(self) -> list[int]:
        """The size classes (bits) the library refused, now computed on the CPU; warns (once per
        class) about those not reported yet."""
        classes = [int(c) for c in self._raw.cpu_size_classes()]
        with self._warn_lock:
            new = [c for c in classes if c not in self._warned]
            self._warned.update(new)
        for c in new:
            msg = (f"{self._where}: cpaCyLnModExp refused the {c}-bit size class "
                   f"(CPA_STATUS_FAIL): {c}-bit operations run on the CPU for the rest of this "
                   "session; other sizes stay on the card")
            log.warning(msg)
            warnings.warn(msg, QatSizeClassWarning, stacklevel=2)
        return classes

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking work; in-flight requests get ``timeout`` seconds to land, the rest are
        flagged failed (their callers recompute them on the CPU)."""
        self._raw.close(timeout)


def simulator_path() -> str | None:
    """Our simulator library, built by setup.py next to this module (None when not built)."""
    found = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "libqat_sim*.so")))
    return found[0] if found else None


def simulator_allowed(simulator: bool | None = None) -> bool:
    if simulator is not None:
        return bool(simulator)
    return os.environ.get("UNIFL_QAT_SIMULATOR", "1") != "0"


def usdm_names_for(qat_library: str) -> tuple[str, ...]:
    """The USDM sonames that belong with a QAT library: ``libusdm_drv_s.so`` for the QAT 1.x
    ``libqat_s.so``, qatlib's ``libusdm.so.0`` / ``libusdm.so`` otherwise."""
    if os.path.basename(qat_library).startswith("libqat_s."):
        return QAT1X_USDM_NAMES
    return QATLIB_USDM_NAMES


def search_real_library(dirs: Sequence[str] = (), load: Loader = _dlopen
                        ) -> tuple[str, tuple[str, ...]] | None:
    """(the first real QAT library of :data:`REAL_QAT_NAMES` that loads here, its USDM names), or
    None.  Each name is tried as a bare soname (the dynamic linker's search) or, with ``dirs``, in
    each of those folders.  Before each QAT library, its USDM is loaded RTLD_GLOBAL (when present):
    ``libqat_s.so`` resolves the qaeMem* functions from the global scope, so a probe without it
    fails with an undefined symbol even where the library is installed.  QAT libraries themselves
    are probed RTLD_LOCAL."""
    def where(name: str) -> list[str]:
        return [os.path.join(d, name) for d in dirs] if dirs else [name]

    usdm_loaded: set[tuple[str, ...]] = set()
    for name in REAL_QAT_NAMES:
        usdm = usdm_names_for(name)
        if usdm not in usdm_loaded:
            usdm_loaded.add(usdm)
            for u in usdm:
                try:
                    load(u, ctypes.RTLD_GLOBAL)
                except OSError:
                    continue
                break
        for path in where(name):
            try:
                load(path, ctypes.RTLD_LOCAL)
            except OSError:
                continue
            return path, usdm
    return None


def find_real_library() -> str | None:
    """The soname of an installed real QAT library that loads here, else None (cached)."""
    if "qat" not in _real_cache:
        _real_cache["qat"] = search_real_library()
    found = _real_cache["qat"]
    return found[0] if found else None


def resolve(library: str | None = None, simulator: bool | None = None
            ) -> tuple[list[str], list[str], bool]:
    """(QAT library candidates, USDM library candidates, is_simulator) or BackendUnavailable."""
    library = library or os.environ.get("UNIFL_QAT_LIBRARY") or None
    sim = simulator_path()
    if library and library.lower() in SIMULATOR_WORDS:
        if not sim:
            raise BackendUnavailable("the QAT simulator library was requested but is not built "
                                     "(run `python setup.py build_ext --inplace`)")
        return [sim], [], True
    usdm_env = os.environ.get("UNIFL_QAT_USDM_LIBRARY")

    def usdm_for(qat_library: str) -> list[str]:
        return [usdm_env] if usdm_env else list(usdm_names_for(qat_library))

    if library:
        if os.sep in library and not os.path.exists(library):
            raise BackendUnavailable(
                f"QAT library {library!r} not found (from qat.library / UNIFL_QAT_LIBRARY); "
                "point it at libqat.so (qatlib) or libqat_s.so (QAT 1.x driver), or use "
                "'simulator'")
        return [library], usdm_for(library), os.path.abspath(library) == os.path.abspath(sim or "")
    real = find_real_library()
    if real:
        return [real], usdm_for(real), False
    if sim and simulator_allowed(simulator):
        return [sim], [], True
    why = ("the simulator is disabled (simulator=False / UNIFL_QAT_SIMULATOR=0)" if sim
           else "the QAT simulator is not built")
    raise BackendUnavailable(
        f"libqat.so not found (tried {', '.join(REAL_QAT_NAMES)}) and {why}; install qatlib or "
        "the QAT driver package, or set qat.library / UNIFL_QAT_LIBRARY to its path")


def session(library: str | None = None, simulator: bool | None = None,
            section: str | None = None) -> Session:
    """The live driver session for this library (opened on first use, or again after close());
    BackendUnavailable when it cannot be opened."""
    global _session, _session_key
    if not BUILT:
        raise BackendUnavailable(f"QAT driver extension not built ({IMPORT_ERROR})")
    qat_names, usdm_names, _ = resolve(library, simulator)
    section = section or os.environ.get("UNIFL_QAT_SECTION") or "SSL"
    key = (tuple(qat_names), tuple(usdm_names), section)
    with _lock:
        if _session is not None and not _session.closed and _session_key == key:
            return _session
        if _session is not None and not _session.closed:
            # one QAT user-space process per OS process: a different library replaces the old one
            _session.close(10.0)
        try:
            _session = Session(_qat.Session(qat_names, usdm_names, section), qat_names, section)
        except RuntimeError as exc:
            _session = None
            raise BackendUnavailable(f"QAT could not be started ({qat_names[0]}, section "
                                     f"[{section}]): {exc}") from exc
        _session_key = key
        return _session


def close(timeout: float = 10.0) -> None:
    """Close the process's QAT session: in-flight requests get ``timeout`` seconds to land, the
    rest are recomputed on the CPU by their callers.  The next use opens a fresh session."""
    global _session
    with _lock:
        s, _session = _session, None
    if s is not None:
        s.close(timeout)


atexit.register(close, 5.0)
