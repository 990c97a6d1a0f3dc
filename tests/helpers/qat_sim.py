"""The QAT simulator sessions the qat tests share: a factory of ``qat`` backends, each on a fresh
simulator session configured by ``UNIFL_QAT_SIM_*`` variables (set through ``monkeypatch``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import unifl


def simulator_backends(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """Body of a ``sim`` fixture: yields ``make(env=None, **options)``; closes the session after."""
    from unifl.backends.qat import runtime

    runtime.close()

    def make(env: dict | None = None, **opts: Any) -> Any:
        runtime.close()
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, str(v))
        return unifl.backend("qat", library="simulator", **opts)

    yield make
    runtime.close()
