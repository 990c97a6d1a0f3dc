"""Options of the ``native`` backend: one definition, parsed by ``NativeBackend(**options)`` and by a
party's ``native:`` YAML section alike (:class:`unifl.core.options.BackendOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...core.options import BackendOptions, option


@dataclass(frozen=True)
class NativeOptions(BackendOptions):
    """The C++ backend's worker pool."""

    # 4096 is the extension's own limit (src/native.cpp refuses more): refused here at load time
    threads: Optional[int] = option(
        None, "worker threads of every batch, at most 4096; null: env UNIFL_THREADS, else one "
              "per hardware thread", ge=1, le=4096)
