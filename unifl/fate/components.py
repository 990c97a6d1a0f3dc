"""FATE components shipped through the ``fate.ext.component_desc`` entry point (see setup.py).

FATE loads an entry-point component only when a job names one that is not built in, and loading it
imports this module, which registers kind ``unifl`` in that task's process (:mod:`unifl.fate`).
So each component here is FATE's own built-in (same stages, parameters, inputs and outputs) under a
``unifl_`` name: a pipeline swaps ``coordinated_lr`` for ``unifl_coordinated_lr`` and sets
``he_param: {kind: unifl, key_length: 2048}``; each party picks its backend with ``UNIFL_BACKEND`` or
``UNIFL_CONFIG`` (its UniFL YAML) in the environment of its FATE worker.
"""

from __future__ import annotations

import copy
from typing import Any

import unifl.fate  # noqa: F401  (registers kind "unifl")

PROVIDER = "unifl"


def _rename(builtin: Any, name: str) -> Any:  # FATE's Component
    cpn = copy.copy(builtin)
    cpn.name = name
    cpn.provider = PROVIDER
    cpn.description = (f"FATE's {builtin.name} with UniFL's PHE kind available "
                       f"(he_param.kind = unifl). " + (builtin.description or ""))
    return cpn


def _load(module: str, attr: str) -> Any:
    import importlib
    return getattr(importlib.import_module(f"fate.components.components.{module}"), attr)


unifl_coordinated_lr = _rename(_load("coordinated_lr", "coordinated_lr"), "unifl_coordinated_lr")
unifl_coordinated_linr = _rename(_load("coordinated_linr", "coordinated_linr"),
                                 "unifl_coordinated_linr")
unifl_hetero_secureboost = _rename(_load("hetero_secureboost", "hetero_secureboost"),
                                   "unifl_hetero_secureboost")
