"""The far side of a peer measured in another interpreter: ``python -m unifl.bench.worker TASK ...``.

FATE 2.2 pins pydantic 1 and UniFL uses pydantic 2, so FATE's kit is measured inside FATE's own
virtual environment; :func:`unifl.bench.peers.run_worker` starts this module there.

Protocol: stdout carries exactly one JSON document, ``{"schema": "unifl-bench-rows/1", "rows":
[...]}`` with each row as :meth:`unifl.bench.harness.Row.to_dict` writes it.  Everything else the
measured code prints (FATE's and torch's logging, C libraries writing to file descriptor 1) is sent
to stderr, so it can never corrupt the document.  A failure exits non-zero with the error on stderr.

Tasks:

``fate-kit --bits B [--min-time T] [--repeats R] [--quick] [--backend NAME ...]``
    FATE's own Paillier kit and UniFL's FATE kit on each backend
    (:func:`unifl.bench.peers.fate_kit_rows`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from .harness import ROWS_SCHEMA, Row


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m unifl.bench.worker",
                                description="measure a benchmark peer; one JSON document on stdout")
    tasks = p.add_subparsers(dest="task", required=True)
    fk = tasks.add_parser("fate-kit", help="FATE's Paillier kit and UniFL's FATE kit")
    fk.add_argument("--bits", type=int, required=True, help="Paillier key size")
    fk.add_argument("--min-time", type=float, default=0.3, help="seconds per timed repetition")
    fk.add_argument("--repeats", type=int, default=3, help="timed repetitions")
    fk.add_argument("--backend", action="append", default=[], help="UniFL backend (repeatable)")
    fk.add_argument("--quick", action="store_true", help="tiny batches")
    return p


def _run(args: argparse.Namespace) -> list[Row]:
    from . import peers
    if args.task == "fate-kit":
        return peers.fate_kit_rows(args.bits, args.min_time, args.repeats, args.quick, args.backend)
    raise ValueError(f"unknown task {args.task!r}")   # argparse refuses it first


def main(argv: Sequence[str] | None = None) -> int:
    """Run one task and write its rows as one JSON document on stdout (see the module docstring)."""
    args = _parser().parse_args(argv)
    sys.stdout.flush()
    document_fd = os.dup(1)
    os.dup2(2, 1)   # while the task runs, whatever anyone prints to fd 1 lands on stderr
    try:
        rows = _run(args)
    finally:
        sys.stdout.flush()
        os.dup2(document_fd, 1)
        os.close(document_fd)
    sys.stdout.write(json.dumps({"schema": ROWS_SCHEMA, "rows": [r.to_dict() for r in rows]}))
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
