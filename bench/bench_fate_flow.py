"""FATE users' view of UniFL: kind ``unifl`` against kind ``paillier`` in FATE's own jobs.

Two measurements (FATE venv, ``PYTHONPATH=$PWD``):

``flow``: real FATE-Flow 2.2.0 jobs (unifl.fate.flow): starts a standalone server on free ports
(home ``build/fate-flow/home`` unless --home), registers UniFL's provider, uploads the data set and runs
one job per (algorithm, kind): Reader -> PSI -> model.  Per job: fit wall time (pipeline.fit(), submit
to success), each task's elapsed time as FATE-Flow records it (worker start-up included), AUC of the
guest's training output.  Default data: default_credit (30000 rows) from ../shared/data; needs it.

``profile``: the same FATE modules through FATE's multiprocess launcher (unifl.fate.jobs) with cProfile
in every process of every party: the party's main process *and* each worker of the standalone
engine's partition pool (FATE runs the DataFrame's per-partition work, and with it most PHE calls,
there).  Own time (cProfile's tottime) is summed per category over all processes:

* ``crypto``: UniFL's batch and backends (unifl.phe_sdk/core/mod_op/base_op/backends, gmpy2) for
  kind unifl; FATE's Rust kit (fate_utils) for kind paillier;
* ``kit``: the FATE-facing kit, i.e. conversions between FATE's tensors and ciphertext batches
  (unifl/fate/kit.py, or fate/arch/protocol/phe/paillier.py);
* ``framework``: everything else that computes (FATE's DataFrame, torch, pandas, pickling, federation);
* ``imports``: module loading; ``waiting``: lock waits, sleeps and selects (a party waiting on its pool
  or on a peer), reported but not counted as work.

    python bench/bench_fate_flow.py flow --dataset default_credit_hetero --algos lr sbt
    python bench/bench_fate_flow.py profile --dataset breast_hetero --algo lr --kinds paillier unifl
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "bench" / "results"

CRYPTO = ("/unifl/phe_sdk/", "/unifl/core/", "/unifl/mod_op/", "/unifl/base_op/", "/unifl/backends/",
          "unifl.backends.", "gmpy2", "fate_utils")
KIT = ("/unifl/fate/kit.py", "/fate/arch/protocol/phe/paillier.py")
WAITING = ("acquire' of '_thread.lock", "time.sleep", "select.", "posix.waitpid", "'poll'",
           "_thread.RLock", "'wait'")
# module loading, including what libraries do while being imported (module bodies run by exec,
# scipy/torch building docstrings and signatures)
IMPORTS = ("<frozen importlib", "marshal.loads", "_imp.create_dynamic", "_imp.exec_dynamic",
           "builtins.__build_class__", "builtins.exec", "_docscrape.py", "inspect.py:cleandoc")


def category(key: tuple[str, int, str]) -> str:
    filename, _, func = key
    where = f"{filename}:{func}"
    if any(w in where for w in WAITING):
        return "waiting"
    if any(c in where for c in CRYPTO):
        return "crypto"
    if any(k in filename for k in KIT):
        return "kit"
    if any(i in where for i in IMPORTS):
        return "imports"
    return "framework"


def readable(paths: list[Path]) -> list[Path]:
    """The profiles that load (a pool worker killed while dumping leaves a broken file)."""
    good = []
    for path in paths:
        try:
            pstats.Stats(str(path))
        except (EOFError, TypeError, ValueError, OSError) as exc:
            print(f"skipping {path}: {exc}", file=sys.stderr)
        else:
            good.append(path)
    return good


def summarize(paths: list[Path]) -> dict[str, float]:
    """Own seconds per category over every profile in ``paths``."""
    out = {c: 0.0 for c in ("crypto", "kit", "framework", "imports", "waiting")}
    for path in paths:
        for key, (_, _, tottime, _, _) in pstats.Stats(str(path)).stats.items():  # type: ignore[attr-defined]
            out[category(key)] += tottime
    return out


def top_functions(paths: list[Path], cat: str, n: int = 12) -> list[tuple[float, str]]:
    total: dict[str, float] = {}
    for path in paths:
        for key, (_, _, tottime, _, _) in pstats.Stats(str(path)).stats.items():  # type: ignore[attr-defined]
            if category(key) == cat:
                name = f"{key[0].split('site-packages/')[-1].split('/work/main/')[-1]}:{key[1]}({key[2]})"
                total[name] = total.get(name, 0.0) + tottime
    return sorted(((round(v, 3), k) for k, v in total.items()), reverse=True)[:n]


# ---- profile: FATE's launcher, every process under cProfile ------------------------------------------

def _profile_partition_tasks(out_dir: Path) -> None:
    """In this process, run each task of FATE's standalone partition pool under one cProfile.

    The launcher and the pool start processes with ``spawn``, so every party process and every pool
    worker imports this file as ``__mp_main__``; patching here patches the class the worker unpickles
    the pool's task function from (a bound classmethod, pickled by name)."""
    from fate.arch.computing.backends.standalone import _standalone

    from multiprocessing import util

    wrapped = _standalone.BasicProcessPool._process_wrapper.__func__
    prof = cProfile.Profile()
    path = out_dir / f"partition-{os.getpid()}.prof"
    last_dump = [0.0]

    def dump() -> None:   # atomically: a reader never sees half a file
        if not prof.getstats():   # a party's own process imports this file too, and runs no task
            return
        prof.dump_stats(str(path) + ".tmp")
        os.replace(str(path) + ".tmp", path)
        last_dump[0] = time.monotonic()

    # when the pool shuts its workers down cleanly; the dumps every 5 s cover a worker that is killed
    util.Finalize(None, dump, exitpriority=100)

    def _process_wrapper(cls: Any, do_func: Any, process_info: Any, log_level: Any) -> Any:
        prof.enable()
        try:
            return wrapped(cls, do_func, process_info, log_level)
        finally:
            prof.disable()
            if time.monotonic() - last_dump[0] > 5.0:
                dump()

    _standalone.BasicProcessPool._process_wrapper = classmethod(_process_wrapper)


def _profiled_party_main(ctx: Any) -> None:
    """One party's process under cProfile (its pool's workers profile themselves, see above)."""
    import unifl.fate.jobs as jobs

    out_dir = Path(os.environ["UNIFL_PROFILE_DIR"])
    prof = cProfile.Profile()
    prof.enable()
    try:
        jobs.party_main(ctx)
    finally:
        prof.disable()
        prof.dump_stats(str(out_dir / f"{ctx.local.role}-main-{os.getpid()}.prof"))


if __name__ == "__mp_main__" and os.environ.get("UNIFL_PROFILE_DIR"):
    _profile_partition_tasks(Path(os.environ["UNIFL_PROFILE_DIR"]))


PARTIES = {"lr": ["guest:9999", "host:10000", "arbiter:10001"], "sbt": ["guest:9999", "host:10000"]}


def baseline_tree(rev: str, work: Path) -> Path:
    """A copy of this checkout's ``unifl`` (built backends included) with unifl/fate/kit.py as of
    git revision ``rev``: the kit of another revision on today's everything else."""
    dest = work / f"baseline-{rev}"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(ROOT / "unifl", dest / "unifl", ignore=shutil.ignore_patterns("__pycache__"))
    old = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:unifl/fate/kit.py"],
                         capture_output=True, text=True, check=True).stdout
    (dest / "unifl" / "fate" / "kit.py").write_text(old)
    return dest


def profile_job(algo: str, kind: str, dataset: str, data_dir: Path, work: Path, size: dict[str, int],
                key_length: int, src: Path = ROOT, label: str = "") -> dict[str, Any]:
    """One launcher job with every process profiled; returns the categories and the fit time.
    ``src`` is the folder whose ``unifl`` package the parties import."""
    kind_label = kind + (f"-{label}" if label else "")
    prof_dir = work / f"prof-{algo}-{kind_label}"
    prof_dir.mkdir(parents=True, exist_ok=True)
    for old in prof_dir.glob("*.prof"):
        old.unlink()
    out = work / f"{algo}-{kind_label}.json"
    backends = ",".join(f"{p.split(':')[0]}=native" for p in PARTIES[algo])
    cmd = [sys.executable, __file__, "_party", "--algo", algo, "--kind", kind, "--backends", backends,
           "--dataset", dataset, "--key_length", str(key_length), "--out", str(out),
           "--parties", *PARTIES[algo], "--log_level", "WARNING",
           "--data_dir", str(work / f"standalone-{algo}-{kind_label}")]
    for k, v in size.items():
        cmd += [f"--{k}", str(v)]
    env = dict(os.environ, UNIFL_PROFILE_DIR=str(prof_dir), UNIFL_DATA=str(data_dir),
               PYTHONPATH=os.pathsep.join([str(src), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{algo}/{kind} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    result = json.loads(out.read_text())
    time.sleep(2)   # pool workers outliving the launcher finish their last dump
    profiles = readable(sorted(prof_dir.glob("*.prof")))
    cats = summarize(profiles)
    work_s = sum(v for k, v in cats.items() if k not in ("waiting", "imports"))
    return {"algo": algo, "kind": kind, "kit": label or "this checkout", "dataset": dataset,
            "auc": result["auc"],
            "fit_s": result["fit_seconds"], "launcher_wall_s": wall,
            "profiles": len(profiles), "partition_profiles": sum("partition" in p.name for p in profiles),
            "own_s": {k: round(v, 2) for k, v in cats.items()},
            "phe_share_of_work": round((cats["crypto"] + cats["kit"]) / work_s, 3) if work_s else None,
            "top_kit": top_functions(profiles, "kit"), "top_crypto": top_functions(profiles, "crypto", 8),
            "top_framework": top_functions(profiles, "framework", 10)}


# ---- flow: real FATE-Flow jobs -------------------------------------------------------------------

def flow_bench(args: argparse.Namespace) -> dict[str, Any]:
    from unifl.fate import flow
    data_dir = Path(args.data_dir)
    for role in ("guest", "host"):
        if not (data_dir / f"{args.dataset}_{role}.csv").is_file():
            raise SystemExit(f"{data_dir / (args.dataset + '_' + role + '.csv')} not found "
                             "(default_credit comes from ../shared/data; pass --data-dir)")
    server = flow.FlowServer(Path(args.home), sys.executable, http_port=flow.free_port(),
                             grpc_port=flow.free_port())
    server.init()
    rows = []
    try:
        start_s = server.start(timeout=180)
        server.register_provider()
        upload_s = flow.upload(server, args.dataset, data_dir)
        print(f"server up in {start_s:.1f} s; upload {upload_s}", flush=True)
        for algo in args.algos:
            for kind in args.kinds:
                spec = flow.ModelSpec(algo, kind, args.key_length, args.epochs, args.trees, args.depth)
                res = flow.run_job(server, args.dataset, [spec], timeout=args.timeout)
                m = res.models[0]
                row = {"algo": algo, "kind": kind, "job_id": res.job_id, "auc": round(m.auc, 6),
                       "job_wall_s": round(res.wall_s, 1), "model_task_s": m.task_s,
                       "tasks_s": {k: round(v, 1) for k, v in res.task_s.items()}}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.stop()
    return {"dataset": args.dataset, "key_length": args.key_length, "epochs": args.epochs,
            "trees": args.trees, "depth": args.depth, "upload_s": upload_s, "jobs": rows}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_party":   # one party, spawned by FATE's launcher
        sys.argv.pop(1)
        from fate.arch.launchers.multiprocess_launcher import launch
        launch(_profiled_party_main)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["flow", "profile"])
    p.add_argument("--dataset", default="default_credit_hetero")
    p.add_argument("--data-dir", default=None,
                   help="default: unifl/app/data when it has the data set, else ../shared/data")
    p.add_argument("--algos", nargs="+", default=["lr", "sbt"], choices=["lr", "sbt"])
    p.add_argument("--kinds", nargs="+", default=["paillier", "unifl"])
    p.add_argument("--key-length", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--trees", type=int, default=3)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--home", default=str(ROOT / "build" / "fate-flow" / "home"))
    p.add_argument("--work", default=str(ROOT / "build" / "fate-profile"))
    p.add_argument("--json", default=None, help="write the results here (default: bench/results/)")
    p.add_argument("--baseline-rev", default=None,
                   help="profile: also run kind unifl with unifl/fate/kit.py of this git revision")
    a = p.parse_args()
    if a.data_dir is None:
        packaged = ROOT / "unifl" / "app" / "data"
        a.data_dir = str(packaged if (packaged / f"{a.dataset}_guest.csv").is_file() else SHARED_DATA)
    if a.mode == "flow":
        report: Any = flow_bench(a)
    else:
        work = Path(a.work)
        work.mkdir(parents=True, exist_ok=True)
        report = []
        for algo in a.algos:
            size = {"epochs": a.epochs} if algo == "lr" else {"trees": a.trees, "depth": a.depth}
            runs = [(kind, ROOT, "") for kind in a.kinds]
            if a.baseline_rev:
                runs.append(("unifl", baseline_tree(a.baseline_rev, work), a.baseline_rev))
            for kind, src, label in runs:
                row = profile_job(algo, kind, a.dataset, Path(a.data_dir), work, size, a.key_length,
                                  src, label)
                report.append(row)
                print(json.dumps({k: v for k, v in row.items() if not k.startswith("top_")}),
                      flush=True)
    path = Path(a.json) if a.json else RESULTS / f"fate_{a.mode}_{a.dataset}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
