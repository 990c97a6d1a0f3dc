"""Run every fuzz harness (``fuzz/fuzz_*.py``) for a number of inputs and report per harness.

    python fuzz/run.py                 # 100,000 inputs each (``make fuzz``)
    python fuzz/run.py --runs 2000 codec frame

Each harness runs in its own process with a fresh temporary corpus (filled with its generated
seeds), ``-runs=N``, a per-input time limit and an RSS limit.  A harness passes when libFuzzer
reports ``Done N runs`` and exits 0; any crash (an exception other than a UniflError, a hang past
``-timeout``, memory past ``-rss_limit_mb``) fails it, and the crashing input is written to
``build/fuzz/<harness>-crash-*`` (``-artifact_prefix``) for replay: ``python fuzz/fuzz_<t>.py FILE``.
Exit status: 0 when every harness passed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FUZZ_DIR = Path(__file__).resolve().parent
HARNESSES = sorted(p.stem.removeprefix("fuzz_") for p in FUZZ_DIR.glob("fuzz_*.py"))
_DONE = re.compile(r"^Done (\d+) runs in (\d+) second", re.M)
_CRASH = re.compile(r"(Uncaught Python exception|ERROR: libFuzzer|Test unit written to .*)")


@dataclass
class Result:
    """One harness run: inputs executed, wall time, and why it failed (None when it passed)."""
    name: str
    runs: int
    seconds: float
    failure: str | None
    output: str


def run_harness(name: str, runs: int, timeout_s: float, per_input_s: int = 10,
                rss_limit_mb: int = 2048, extra: tuple[str, ...] = (),
                script: Path | None = None) -> Result:
    """Run ``fuzz/fuzz_<name>.py`` (or ``script``) for ``runs`` inputs in a subprocess (wall limit
    ``timeout_s``)."""
    script = script or FUZZ_DIR / f"fuzz_{name}.py"
    with tempfile.TemporaryDirectory(prefix=f"unifl-fuzz-{name}-") as work:
        corpus, scratch = os.path.join(work, "corpus"), os.path.join(work, "tmp")
        os.mkdir(corpus)
        os.mkdir(scratch)
        cmd = [sys.executable, str(script), corpus, f"-runs={runs}", f"-timeout={per_input_s}",
               f"-rss_limit_mb={rss_limit_mb}", "-print_final_stats=1", *extra]
        t0 = time.perf_counter()
        try:
            env = {**os.environ, "TMPDIR": scratch}    # a harness's scratch files go with it
            proc = subprocess.run(cmd, cwd=FUZZ_DIR, capture_output=True, text=True,
                                  errors="replace", timeout=timeout_s, env=env)
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = ((exc.stdout or b"").decode(errors="replace")
                   + (exc.stderr or b"").decode(errors="replace"))
            return Result(name, 0, time.perf_counter() - t0,
                          f"did not finish {runs} inputs within {timeout_s:g} s", out)
        seconds = time.perf_counter() - t0
    done = _DONE.search(out)
    count = int(done.group(1)) if done else 0
    failure = None
    if rc != 0 or not done:
        crash = _CRASH.findall(out)
        failure = f"exit status {rc}: " + ("; ".join(crash[-3:]) if crash else "no 'Done' line")
    elif count < runs:
        failure = f"only {count} of {runs} inputs ran"
    return Result(name, count, seconds, failure, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("harness", nargs="*", help=f"which (default all: {', '.join(HARNESSES)})")
    ap.add_argument("--runs", type=int, default=100_000, help="inputs per harness")
    ap.add_argument("--timeout", type=float, default=3600.0, help="wall seconds per harness")
    args = ap.parse_args(argv)
    names = args.harness or HARNESSES
    unknown = sorted(set(names) - set(HARNESSES))
    if unknown:
        ap.error(f"unknown harness {unknown}; have {HARNESSES}")
    results = []
    for name in names:
        print(f"fuzz {name}: {args.runs} inputs ...", flush=True)
        r = run_harness(name, args.runs, args.timeout)
        results.append(r)
        status = "ok, 0 crashes" if r.failure is None else f"FAILED: {r.failure}"
        print(f"fuzz {name}: {r.runs} inputs in {r.seconds:.1f} s "
              f"({r.runs / max(r.seconds, 1e-9):.0f}/s): {status}", flush=True)
        if r.failure:
            print(r.output[-4000:], file=sys.stderr)
    print("\nharness          inputs   seconds  result")
    for r in results:
        print(f"{r.name:<15} {r.runs:>8} {r.seconds:>9.1f}  {'ok' if r.failure is None else 'CRASH'}")
    print(f"total            {sum(r.runs for r in results):>8} "
          f"{sum(r.seconds for r in results):>9.1f}")
    return 0 if all(r.failure is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
