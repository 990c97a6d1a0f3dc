"""Per-sub-task timing of a federated job, in the shape of FLASH Table 1: each sub-task names the
cryptographic operations (O1–O9) it runs, its wall time and the part of it spent inside SDK calls."""

from __future__ import annotations

import contextlib
import time
from typing import ContextManager, Iterator, Protocol


class Advance(Protocol):
    """What a progress bar context yields: ``advance(n)`` moves the bar ``n`` steps."""

    def __call__(self, n: int = 1) -> None: ...


class Timings:
    """Wall and crypto seconds per named sub-task (sub-tasks may be entered many times)."""

    def __init__(self) -> None:
        self._rows: dict[str, dict] = {}
        self._current: list[str] = []

    @contextlib.contextmanager
    def subtask(self, name: str, crypto_ops: str) -> Iterator[None]:
        row = self._rows.setdefault(name, {"subtask": name, "crypto_ops": crypto_ops,
                                           "seconds": 0.0, "crypto_seconds": 0.0})
        self._current.append(name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            row["seconds"] += time.perf_counter() - t0
            self._current.pop()

    @contextlib.contextmanager
    def crypto(self) -> Iterator[None]:
        """Time an SDK call; counted in the innermost open sub-task."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._current:
                self._rows[self._current[-1]]["crypto_seconds"] += time.perf_counter() - t0

    def add_background(self, name: str, seconds: float) -> None:
        """Record under the sub-task ``name`` (entered before) work of it that ran on a background
        thread, off the party's critical path: its ``background_seconds``."""
        row = self._rows[name]
        row["background_seconds"] = row.get("background_seconds", 0.0) + seconds

    def rows(self) -> list[dict]:
        return [dict(r) for r in self._rows.values()]


def progress_bar(total: int, description: str, enabled: bool) -> ContextManager[Advance]:
    """A rich progress bar context yielding an ``advance()`` callable (no-op when disabled)."""
    if not enabled:
        return contextlib.nullcontext(lambda n=1: None)
    return _rich_bar(total, description)


@contextlib.contextmanager
def _rich_bar(total: int, description: str) -> Iterator[Advance]:
    from rich.errors import LiveError
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    prog = Progress(TextColumn("{task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
    try:
        prog.start()
    except LiveError:  # another party of this process already shows a bar (threads in tests)
        yield lambda n=1: None
        return
    try:
        task = prog.add_task(description, total=total)
        yield lambda n=1: prog.advance(task, n)
    finally:
        prog.stop()
