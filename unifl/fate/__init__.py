"""UniFL inside FATE 2.x: a PHE kit of kind ``unifl`` (see :mod:`unifl.fate.kit`).

``import unifl.fate`` registers the kind in the running process (:mod:`unifl.fate.register`) when
FATE (pyfate 2.2) is importable; FATE's components load it through the ``fate.ext.component_desc``
entry points (:mod:`unifl.fate.components`).  Which backend a party computes on:
:mod:`unifl.fate.party`.  Nothing in FATE's files is edited.
"""

from __future__ import annotations

try:  # FATE is optional: without it this package only documents itself
    import fate as _fate  # noqa: F401
except ImportError:  # pragma: no cover - exercised in the main venv
    FATE_AVAILABLE = False
else:
    FATE_AVAILABLE = True
    from .register import install as _install

    _install()

from .party import current_backend, report, selection, set_backend  # noqa: E402

__all__ = ["FATE_AVAILABLE", "current_backend", "set_backend", "selection", "report"]
