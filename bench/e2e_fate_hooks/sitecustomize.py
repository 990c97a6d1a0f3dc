"""Counts the PHE work of a FATE job run with kind unifl, in every process of the job.

Loaded by Python at start-up when this folder is on ``PYTHONPATH`` (bench_e2e.py puts it there
for its FATE runs only) and active only with ``UNIFL_E2E_COUNT_DIR`` set.  FATE runs most of a
job's PHE calls in the worker processes of its partition pool, which no code of the job's own
can reach; this hook waits until a process imports ``unifl.fate.party`` / ``unifl.fate.kit`` (the
kit, when FATE unpickles a key or ciphertexts) and then

* wraps the party's backend in the scheduler's ``CountingBackend`` (calls, elements and seconds
  per op), and
* counts the kit's encryptions by their ``obfuscate`` flag (elements with a fresh r^n, and
  elements encrypted as the deterministic 1 + m·n),

writing ``p<pid>.json`` (pid, parent pid, both counts) into the folder at most once a second
and when the process ends.  Nothing is imported, and nothing changes, in a process that never
loads the kit.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys
import threading
import time
from typing import Any

_DIR = os.environ.get("UNIFL_E2E_COUNT_DIR")
_state: dict[str, Any] = {"backend": None, "encrypt": {"obfuscated": 0, "plain": 0},
                          "last": 0.0}
_lock = threading.Lock()


def _dump(force: bool = False) -> None:
    now = time.monotonic()
    with _lock:
        if not force and now - _state["last"] < 1.0:
            return
        _state["last"] = now
        be = _state["backend"]
        doc = {"pid": os.getpid(), "ppid": os.getppid(),
               "report": be.own_report() if be is not None else [],
               "encrypt": dict(_state["encrypt"])}
    tmp = os.path.join(_DIR, f".p{os.getpid()}.tmp")   # type: ignore[arg-type]
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, os.path.join(_DIR, f"p{os.getpid()}.json"))   # type: ignore[arg-type]


def _arm_exit() -> None:
    """Dump once more when the process ends: at exit, and -- for a multiprocessing child, which
    leaves through os._exit after clearing the finalizers it inherited -- through a finalizer
    registered now, while it runs."""
    if _state.get("armed"):
        return
    _state["armed"] = True
    atexit.register(_dump, True)
    from multiprocessing import util as mp_util
    mp_util.Finalize(None, _dump, args=(True,), exitpriority=100)


def _instrument_party(party: Any) -> None:
    from unifl.scheduler.counting import CountingBackend
    _arm_exit()
    chosen = party.current_backend
    wrapped: dict[int, Any] = {}

    def current_backend() -> Any:
        be = chosen()
        w = wrapped.get(id(be))
        if w is None:
            w = wrapped[id(be)] = CountingBackend(be)
            _state["backend"] = w
            run = w._run

            def counted(op: str, args: tuple) -> Any:
                out = run(op, args)
                _dump()
                return out
            w._run = counted
        return w
    party.current_backend = current_backend


def _instrument_kit(kit: Any) -> None:
    _arm_exit()
    encrypt = kit.PK.encrypt_encoded

    def encrypt_encoded(self: Any, vec: Any, obfuscate: bool) -> Any:
        with _lock:
            _state["encrypt"]["obfuscated" if obfuscate else "plain"] += len(vec.values)
        return encrypt(self, vec, obfuscate)
    kit.PK.encrypt_encoded = encrypt_encoded


_HOOKS = {"unifl.fate.party": _instrument_party, "unifl.fate.kit": _instrument_kit}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a hook on a module right after its body has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _HOOKS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run_body = loader.exec_module   # type: ignore[union-attr]

        def exec_module(module: Any) -> None:
            run_body(module)
            _HOOKS[name](module)
        loader.exec_module = exec_module   # type: ignore[method-assign,union-attr]
        return spec


if _DIR:
    sys.meta_path.insert(0, _AfterImport())
