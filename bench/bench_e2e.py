"""What a user feels: vertical LR end to end, our two jobs against FATE 2.2's coordinated LR.

One run measures, on default_credit (all 30,000 rows unless ``--rows``), full batch, ``--epochs``
epochs, for every key size of ``--key-bits``:

* our two-party vertical LR and our arbiter variant (``unifl.app.vertical``), every party its own
  ``python -m unifl run`` process over gRPC with mutual TLS (the demo's route, a throwaway PKI),
  with the parties on each hardware placement of ``--placements`` -- (native, native),
  (gpu, native), (gpu, gpu) by default; a placement naming a backend this machine cannot run is a
  row that says so (never a fallback under the wrong name);
* FATE 2.2's coordinated LR with kind ``paillier`` (FATE's own kit) and kind ``unifl`` (UniFL's
  kit, backend native), through FATE's multiprocess launcher in FATE's venv (``.venv-fate``), on
  the same training rows, standardised the same way, with our hyper-parameters, AUC on the same
  held-out rows (``bench/e2e_fate.py``); ``--fate-kinds unifl-obfuscated`` adds kind unifl with
  FATE's dropped obfuscation restored (see that file);
* the plaintext reference (``unifl.app.reference.vertical_reference``) on the same split: the
  AUC both federated models must reach.

Per row: wall time (ours: the guest's job from start to result, data loading and key generation
included; FATE: the guest's fit + predict), each party's crypto time and elements per op (the
scheduler's counters; for FATE kind unifl the kit's backend in every FATE process, and the kit's
encryptions with and without obfuscation), each party's time waiting on its peers, pool fills and
hits where the party reports them, the backend and device of every op, and the AUC.

``--link netem`` (root, iproute2) runs our jobs a second time with each party in its own network
namespace, joined by veth pairs to a bridge in a hub namespace that has no other link (the
namespaces hold only private 10.x addresses and their own loopback; nothing routes off the
machine; the parties still speak mutual TLS), behind an emulated link of ``--rtt-ms`` round trip and
``--rate-mbit`` per party: ``tc netem`` on each party's egress where the kernel has it, else
``tc tbf`` for the rate and a delaying relay in the hub namespace (``bench/e2e_relay.py``) for the
round trip (see :class:`NetnsLab`).  There each job runs with overlap off and on (``--overlap``),
giving each party's idle time before and after.  FATE's standalone federation passes messages
through local storage, not a network, so it has no link to emulate.

Output: ``--out`` (default ``bench/results/e2e``) gets ``bench_e2e.json`` (every row, the counting
table, the machine) and ``bench_e2e.png``; progress is printed as it runs.  ``--budget-s`` bounds
the whole run: a job gets at most what is left (and ``--job-timeout-s``); rows that no longer fit
are recorded as skipped.

    python bench/bench_e2e.py                               # the full run (hours on 2 cores)
    python bench/bench_e2e.py --quick                       # 3,000 rows, 1 epoch, 1024 bits
    python bench/bench_e2e.py --gpu                         # the GPU rows, after a warm-up job
                                                            # (bench/gpu_checks.sh)
    python bench/bench_e2e.py --link netem --rtt-ms 20 --rate-mbit 100
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results" / "e2e"
HOOKS = ROOT / "bench" / "e2e_fate_hooks"
FATE_PARTY = ROOT / "bench" / "e2e_fate.py"
SEED = 42
FEATURES = {"guest": 13, "host": 10}
LEARNING_RATE = 0.15
START_ORDER = ("arbiter", "host", "guest")      # servers first; the guest drives the job
#: our jobs: the parties, and whether the per-row encryptions use the DJN fixed base (the
#: ``fixed_base`` option: short random exponents from a comb table, resting on DJN's
#: short-exponent assumption; never the default)
VARIANTS = {"two-party": (("guest", "host"), False),
            "arbiter": (("guest", "host", "arbiter"), False),
            "two-party-djn": (("guest", "host"), True),
            "arbiter-djn": (("guest", "host", "arbiter"), True)}

T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f} s] {msg}", flush=True)


# ------------------------------------------------------------------------------ time budget
@dataclass
class Budget:
    """The run's hard bound: a job gets at most what is left of it (and ``job_cap``)."""

    seconds: float
    job_cap: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def job_timeout(self) -> float | None:
        """Seconds a job may take now, or None when too little is left to start one."""
        left = self.left()
        return None if left < 30 else min(left, self.job_cap)


# ------------------------------------------------------------------------------ data
def _pythonpath(*first: Path) -> str:
    """``first`` ahead of the caller's own PYTHONPATH, which is kept: packages installed with
    ``pip --target`` (a machine without an index) are found there."""
    return os.pathsep.join([*map(str, first), *filter(None, os.environ.get("PYTHONPATH", "")
                                                      .split(os.pathsep))])


def find_data_dir(arg: str | None) -> Path:
    """The folder with FATE's default_credit CSVs: ``--data-dir``, ``$UNIFL_DATA_DIR``, or the
    workspace's shared/data next to (or above) this checkout."""
    cands = [arg, os.environ.get("UNIFL_DATA_DIR"), ROOT.parent / "shared" / "data",
             ROOT.parent.parent / "shared" / "data"]
    for c in cands:
        if c and (Path(c) / "default_credit_hetero_guest.csv").is_file():
            return Path(c)
    raise SystemExit("bench_e2e: default_credit_hetero_guest.csv not found; pass --data-dir "
                     "(the workspace's shared/data holds the 30,000-row files)")


@dataclass
class Split:
    """Our job's rows (the seeded split of unifl.app.vertical.prepare), as CSVs for FATE."""

    prefix: str
    n_train: int
    n_test: int
    reference_auc: float


def prepare_split(data_dir: Path, rows: int, epochs: int, out: Path) -> Split:
    """Write ``out/dc_{guest,host}_{train,test}.csv`` with exactly the rows and standardised
    features our job trains and tests on, and compute the plaintext reference's held-out AUC."""
    import numpy as np

    from unifl.app import reference, vertical
    from unifl.app.data import load_party, sorted_ids
    from unifl.app.metrics import roc_auc
    from unifl.app.params import params_of, validate_job
    job = validate_job(our_job("two-party", 1024, epochs, rows, None))
    p = params_of(job)
    ids = sorted_ids(load_party("default_credit", "guest", str(data_dir)).ids)
    g = vertical.prepare("guest", "default_credit", ids, p, SEED, str(data_dir))
    h = vertical.prepare("host", "default_credit", ids, p, SEED, str(data_dir))
    assert g.y_train is not None and g.y_test is not None
    ref = reference.vertical_reference(g.X_train, h.X_train, g.y_train, task="lr", epochs=epochs,
                                       batch_size=0, learning_rate=LEARNING_RATE, l2=0.0,
                                       tol=None, seed=SEED, l2_mask_g=g.l2_mask)
    ref_auc = roc_auc(g.y_test, g.X_test @ ref["wg"] + h.X_test @ ref["wh"])
    prefix = str(out / "dc")
    for part, (Xg, Xh, y) in {"train": (g.X_train, h.X_train, g.y_train),
                              "test": (g.X_test, h.X_test, g.y_test)}.items():
        Xg = Xg[:, :-1]                       # FATE adds its own intercept column
        for role, X in (("guest", Xg), ("host", Xh)):
            with open(f"{prefix}_{role}_{part}.csv", "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["id"] + (["y"] if role == "guest" else [])
                           + [f"x{i}" for i in range(X.shape[1])])
                for i in range(X.shape[0]):
                    w.writerow([f"r{i}"] + ([int(y[i])] if role == "guest" else [])
                               + [repr(float(v)) for v in np.asarray(X[i])])
    return Split(prefix, g.n_train, g.n_test, float(ref_auc))


# ------------------------------------------------------------------------------ our jobs
def our_job(variant: str, bits: int, epochs: int, rows: int, overlap: bool | None) -> dict:
    params: dict[str, Any] = {"epochs": epochs, "batch_size": 0, "learning_rate": LEARNING_RATE,
                              "l2": 0.0, "tol": None, "features": dict(FEATURES)}
    if rows:
        params["max_rows"] = rows
    if overlap is not None:
        params["overlap"] = overlap
    parties, djn = VARIANTS[variant]
    if djn:
        params["fixed_base"] = True
    return {"job_id": f"e2e-{variant}-{bits}", "algorithm": "vlr", "dataset": "default_credit",
            "parties": list(parties), "seed": SEED, "key_bits": bits, "params": params}


def has_overlap_param() -> bool:
    from unifl.app.params import VerticalParams
    return "overlap" in VerticalParams.model_fields


def backend_missing(name: str) -> str | None:
    """Why ``name`` cannot run here, or None when it can."""
    from unifl.core import registry
    pr = registry.probe(name)
    return None if pr.available else (pr.reason or "unavailable")


def _party_yaml(role: str, backend: str, bits: int, path: Path, threads: int | None,
                dispatch: str = "off") -> Path:
    """``dispatch``: the party's ``dispatch.mode`` (``--dispatch``; a CPU party has nothing to
    dispatch and ignores it)."""
    import yaml
    cfg: dict[str, Any] = {"party": role, "backend": backend, "fallback": [], "key_bits": bits,
                           "network": {"timeout_s": 600}, "dispatch": {"mode": dispatch}}
    if threads is not None and backend == "native":
        cfg["native"] = {"threads": threads}
    path.write_text(yaml.safe_dump(cfg))
    return path


def cpu_sets(roles: Sequence[str]) -> dict[str, list[int]]:
    """One CPU per party (``--pin-cpus``), as if each ran on a machine of its own: the guest the
    first CPU this process may use, the host the second, the arbiter the last (it shares one when
    there are fewer CPUs than parties; it only decrypts a few values per batch)."""
    cpus = sorted(os.sched_getaffinity(0))
    plan = {"guest": cpus[0], "host": cpus[1 % len(cpus)], "arbiter": cpus[-1]}
    return {r: [plan[r]] for r in roles}


def _kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)     # its own session: our child and its children
        except (ProcessLookupError, PermissionError):
            p.kill()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        pass


def _wait_all(procs: dict[str, subprocess.Popen], timeout: float, label: str) -> str | None:
    """Wait for every process; None when all exited 0, else what went wrong (all are stopped)."""
    deadline = time.monotonic() + timeout
    beat = time.monotonic() + 30
    failed_at = None
    while True:
        codes = {r: p.poll() for r, p in procs.items()}
        if all(c is not None for c in codes.values()):
            bad = {r: c for r, c in codes.items() if c != 0}
            return None if not bad else f"exit codes {bad}"
        now = time.monotonic()
        if failed_at is None and any(c not in (None, 0) for c in codes.values()):
            failed_at = now
        if failed_at is not None and now - failed_at > 60:
            for p in procs.values():
                _kill_group(p)
            return f"a party failed and the others did not stop within 60 s: {codes}"
        if now > deadline:
            for p in procs.values():
                _kill_group(p)
            return f"timed out after {timeout:.0f} s"
        if now > beat:
            say(f"  ... {label}: running ({', '.join(r for r, c in codes.items() if c is None)})")
            beat = now + 30
        time.sleep(0.2)


def run_ours(variant: str, placement: dict[str, str], bits: int, epochs: int, rows: int,
             overlap: bool | None, data_dir: Path, work: Path, timeout: float,
             lab: "NetnsLab | None" = None, pin: bool = False,
             profile: Path | None = None, dispatch: str = "off") -> dict[str, Any]:
    """One of our jobs, each party its own process; the row of it.  ``profile``: each party runs
    under cProfile, and ``profile/<job>-<role>.txt`` gets its costliest calls (the main thread's:
    where a party's wall time goes besides the crypto the counters show)."""
    import yaml

    from unifl.app.params import load_job
    from unifl.demo import free_port, tls_party_configs
    roles = VARIANTS[variant][0]
    work.mkdir(parents=True, exist_ok=True)
    job_path = work / "job.yaml"
    job_path.write_text(yaml.safe_dump(our_job(variant, bits, epochs, rows, overlap),
                                       sort_keys=False))
    load_job(job_path)
    pins = cpu_sets(roles) if pin else {}
    cfgs = {r: str(_party_yaml(r, placement[r], bits, work / f"{r}.base.yaml",
                               len(pins[r]) if pin else None, dispatch)) for r in roles}
    party_files = tls_party_configs(cfgs, work)
    if lab is None:
        addrs = {r: f"127.0.0.1:{free_port()}" for r in roles}
        peers = {r: {p: addrs[p] for p in roles if p != r} for r in roles}
    else:
        addrs = {r: lab.address(r) for r in roles}
        peers = {r: {p: lab.peer_address(r, p) for p in roles if p != r} for r in roles}
    env = dict(os.environ, PYTHONPATH=_pythonpath(ROOT), PYTHONUNBUFFERED="1")
    procs: dict[str, subprocess.Popen] = {}
    t0 = time.perf_counter()
    try:
        for role in [r for r in START_ORDER if r in roles]:
            prof = ["-m", "cProfile", "-o", str(work / f"{role}.prof")] if profile else []
            cmd = [sys.executable, *prof, "-m", "unifl", "run", "--config", str(party_files[role]),
                   "--job", str(job_path), "--listen", addrs[role],
                   "--json-out", str(work / f"{role}.json"), "--no-table", "--no-progress",
                   "--data-dir", str(data_dir), "--key-bits", str(bits), "--timeout", "600"]
            cmd += [f"--peer={p}={a}" for p, a in peers[role].items()]
            if pin:
                cmd = ["taskset", "-c", ",".join(map(str, pins[role]))] + cmd
            if lab is not None:
                cmd = lab.exec_prefix(role) + cmd
            with open(work / f"{role}.log", "w") as log:
                procs[role] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                               cwd=str(work), start_new_session=True)
        problem = _wait_all(procs, timeout, f"{variant} {bits}-bit")
    finally:
        for p in procs.values():
            _kill_group(p)
    process_wall = time.perf_counter() - t0
    if profile:
        _profile_text(work, roles, profile / f"{variant}-{placement['guest']}-{placement['host']}"
                                              f"-{bits}")
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for role in roles:
        path = work / f"{role}.json"
        data = json.loads(path.read_text()) if path.is_file() else None
        if data and "error" not in data:
            results[role] = data
        else:
            tail = [ln for ln in (work / f"{role}.log").read_text(errors="replace").splitlines()
                    if ln.strip()][-3:] if (work / f"{role}.log").is_file() else []
            errors[role] = (f"{data['error']['type']}: {data['error']['message']}" if data
                            else " | ".join(tail) or "no result")
    row: dict[str, Any] = {"impl": f"unifl {variant}", "key_bits": bits, "placement": placement,
                           "epochs": epochs, "overlap": overlap,
                           "link": "loopback" if lab is None else lab.describe(),
                           "cpus": pins or None, "process_wall_s": process_wall}
    if problem or errors:
        row.update(status="failed", reason="; ".join(
            [problem or ""] + [f"{r}: {m}" for r, m in errors.items()]).strip("; "))
        return row
    guest = results["guest"]
    row.update(status="ok", wall_s=guest["wall_seconds"], auc=guest["metrics"].get("auc"),
               train_rows=guest["metrics"].get("train_rows"),
               test_rows=guest["metrics"].get("test_rows"),
               parties={r: party_summary(results[r], epochs) for r in roles})
    return row


def _profile_text(work: Path, roles: Sequence[str], stem: Path) -> None:
    """Each party's cProfile record as text: the 40 costliest calls by cumulative time, then the
    25 by own time."""
    import io
    import pstats
    stem.parent.mkdir(parents=True, exist_ok=True)
    for role in roles:
        prof = work / f"{role}.prof"
        if not prof.is_file():
            continue
        buf = io.StringIO()
        stats = pstats.Stats(str(prof), stream=buf)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(25)
        Path(f"{stem}-{role}.txt").write_text(buf.getvalue())


def party_summary(res: dict[str, Any], epochs: int) -> dict[str, Any]:
    """What one party's result says about its crypto, its waiting and its hardware."""
    backend = res.get("backend", {})
    ops = [{k: r.get(k) for k in ("op", "backend", "device", "calls", "elements", "seconds",
                                   "stand_in", "pool", "where", "reason") if k in r}
           for r in backend.get("report", [])]
    net = res.get("network", {})
    ovl = res.get("overlap", {})
    out = {"wall_s": res.get("wall_seconds"),
           # starting its backend (probe, self-test, a GPU's kernels: auto timing unless taken
           # from the tuning record of an earlier job on this machine)
           "start_s": backend.get("start_seconds"),
           # the party's own thread, blocked on its peers: receiving, and sending (overlap on:
           # only when its send queue was full); the transport's waits for comparison
           "idle_s": (ovl.get("blocked_recv_s", 0.0) + ovl.get("blocked_send_s", 0.0)
                      if ovl else net.get("seconds_waiting")),
           "blocked_recv_s": ovl.get("blocked_recv_s"), "blocked_send_s": ovl.get("blocked_send_s"),
           "transport_wait_s": net.get("seconds_waiting"),
           "transport_send_s": net.get("seconds_sending"), "bytes_sent": net.get("bytes_sent"),
           # turning objects into messages and back, on whichever thread sent or received them
           # (out of and into Montgomery form, the private-key guard's scan, the unit check)
           "codec_s": net.get("codec_seconds"),
           "crypto_s": sum(float(o.get("seconds") or 0) for o in ops),
           "ops": ops, "elements_per_epoch": per_epoch(ops, epochs),
           "chosen": backend.get("chosen"), "timings": res.get("timings", []),
           "pool": ovl.get("pool"), "obfuscators": backend.get("obfuscators"),
           "dispatch": backend.get("dispatch")}
    return out


def per_epoch(ops: Sequence[dict[str, Any]], epochs: int) -> dict[str, float]:
    acc: dict[str, float] = {}
    for o in ops:
        acc[str(o["op"])] = acc.get(str(o["op"]), 0.0) + float(o.get("elements") or 0) / epochs
    return dict(sorted(acc.items()))


# ------------------------------------------------------------------------------ FATE
def fate_python(arg: str | None) -> str | None:
    default = str(ROOT / ".venv-fate" / "bin" / "python")
    for c in (arg, os.environ.get("UNIFL_FATE_PYTHON"), default):
        if c and Path(c).is_file():
            return c
    return None


def run_fate(kind: str, bits: int, epochs: int, split: Split, py: str, work: Path,
             timeout: float) -> dict[str, Any]:
    """FATE 2.2's coordinated LR (guest, host, arbiter) with ``kind`` (``unifl-obfuscated``: kind
    unifl with FATE's dropped obfuscation restored); the row of it."""
    work.mkdir(parents=True, exist_ok=True)
    counts = work / "counts"
    counts.mkdir(exist_ok=True)
    real_kind = "unifl" if kind.startswith("unifl") else kind
    out = work / "result.json"
    cmd = [py, str(FATE_PARTY), "--data-prefix", split.prefix, "--kind", real_kind,
           "--key-length", str(bits), "--backend", "native", "--epochs", str(epochs),
           "--out", str(out), "--count-dir", str(counts),
           "--parties", "guest:9999", "host:10000", "arbiter:10001",
           "--log_level", "WARNING", "--data_dir", str(work / "federation")]
    if kind == "unifl-obfuscated":
        cmd.append("--honour-obfuscation")
    env = dict(os.environ, PYTHONPATH=_pythonpath(ROOT, HOOKS), PYTHONUNBUFFERED="1",
               UNIFL_E2E_COUNT_DIR=str(counts))
    t0 = time.perf_counter()
    with open(work / "fate.log", "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work),
                             start_new_session=True)
        try:
            problem = _wait_all({"fate": p}, timeout, f"FATE {kind} {bits}-bit")
        finally:
            _kill_group(p)
    process_wall = time.perf_counter() - t0
    label = {"paillier": "FATE 2.2 paillier", "unifl": "FATE 2.2 unifl (native)",
             "unifl-obfuscated": "FATE 2.2 unifl (native), obfuscation restored"}[kind]
    row: dict[str, Any] = {"impl": label, "key_bits": bits, "epochs": epochs, "link": "loopback",
                           "placement": {r: ("native" if real_kind == "unifl" else "FATE")
                                         for r in ("guest", "host", "arbiter")},
                           "process_wall_s": process_wall}
    if problem or not out.is_file():
        tail = (work / "fate.log").read_text(errors="replace").strip().splitlines()[-3:]
        row.update(status="failed", reason=f"{problem or 'no result'}: {' | '.join(tail)}")
        return row
    res = json.loads(out.read_text())
    row.update(status="ok", wall_s=res["fit_seconds"] + res["predict_seconds"],
               fit_s=res["fit_seconds"], auc=res["auc"], train_rows=res["train_rows"],
               test_rows=res["test_rows"])
    if real_kind == "unifl":
        row["parties"] = fate_counts(counts, epochs)
    return row


def fate_counts(folder: Path, epochs: int) -> dict[str, Any]:
    """Per role: the summed op counters and kit encryptions of its main process and workers."""
    roles = {}
    for f in folder.glob("role-*.json"):
        d = json.loads(f.read_text())
        roles[int(d["pid"])] = d["role"]
    parties: dict[str, Any] = {}
    for f in folder.glob("p*.json"):
        d = json.loads(f.read_text())
        role = roles.get(int(d["pid"])) or roles.get(int(d["ppid"])) or "unknown"
        party = parties.setdefault(role, {"ops": {}, "encrypt": {"obfuscated": 0, "plain": 0},
                                          "processes": 0})
        party["processes"] += 1
        for k, v in d["encrypt"].items():
            party["encrypt"][k] += v
        for r in d["report"]:
            o = party["ops"].setdefault(r["op"], {"op": r["op"], "backend": r["backend"],
                                                   "calls": 0, "elements": 0, "seconds": 0.0})
            o["calls"] += r["calls"]
            o["elements"] += r["elements"]
            o["seconds"] += r["seconds"]
    for party in parties.values():
        ops = list(party["ops"].values())
        party["ops"] = ops
        party["crypto_s"] = sum(o["seconds"] for o in ops)
        party["elements_per_epoch"] = per_epoch(ops, epochs)
        party["encrypt_per_epoch"] = {k: v / epochs for k, v in party["encrypt"].items()}
    return parties


# ------------------------------------------------------------------------------ emulated link
class NetnsLab:
    """Each party in its own network namespace, joined by a veth pair to a bridge in a hub
    namespace that has no other link; every namespace holds only its private 10.x address and its
    own loopback, so nothing routes off the machine.

    The link: where the kernel has ``sch_netem``, ``tc netem`` on each party's egress (delay
    rtt/2, rate); where it does not (this project's VMs: "Specified qdisc kind is unknown"), the
    rate is ``tc tbf`` on each party's egress and the delay a relay process in the hub namespace
    (``bench/e2e_relay.py``: every byte written rtt/2 after it was read, each way), through which
    every party reaches every peer.  Names carry this process's pid; ``close`` deletes exactly the
    namespaces and the relay it made."""

    ROLES = ("guest", "host", "arbiter")

    def __init__(self, rtt_ms: float, rate_mbit: float) -> None:
        self.rtt_ms, self.rate_mbit = rtt_ms, rate_mbit
        tag = os.getpid() % 100000
        net = f"10.77.{tag % 250}"
        self.hub = f"ufl{tag}hub"
        self.hub_addr = f"{net}.254"
        self.ns = {r: f"ufl{tag}{r[0]}" for r in self.ROLES}
        self.addr = {r: f"{net}.{i + 1}" for i, r in enumerate(self.ROLES)}
        self.made: list[str] = []
        self.relay: subprocess.Popen | None = None
        self.mode = "netem"
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def unavailable() -> str | None:
        if os.geteuid() != 0:
            return "needs root (network namespaces)"
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                return f"`{tool}` not found (apt-get install iproute2)"
        return None

    @staticmethod
    def _run(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), check=True, capture_output=True, text=True)

    def _ns(self, ns: str, *cmd: str) -> subprocess.CompletedProcess:
        return self._run("ip", "netns", "exec", ns, *cmd)

    def port(self, role: str) -> int:
        return 50100 + self.ROLES.index(role)

    def relay_port(self, src: str, dst: str) -> int:
        return 51000 + 10 * self.ROLES.index(src) + self.ROLES.index(dst)

    def _build(self) -> None:
        for ns in [self.hub, *self.ns.values()]:
            self._run("ip", "netns", "add", ns)
            self.made.append(ns)
            self._run("ip", "-n", ns, "link", "set", "lo", "up")
        self._run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        self._run("ip", "-n", self.hub, "addr", "add", f"{self.hub_addr}/24", "dev", "br0")
        self._run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for role, ns in self.ns.items():
            self._run("ip", "-n", self.hub, "link", "add", f"h-{role[0]}", "type", "veth",
                      "peer", "name", "eth0", "netns", ns)
            self._run("ip", "-n", self.hub, "link", "set", f"h-{role[0]}", "master", "br0", "up")
            self._run("ip", "-n", ns, "addr", "add", f"{self.addr[role]}/24", "dev", "eth0")
            self._run("ip", "-n", ns, "link", "set", "eth0", "up")
        delay = f"{self.rtt_ms / 2:g}ms"
        rate = f"{self.rate_mbit:g}mbit"
        first = self.ns[self.ROLES[0]]
        probe = subprocess.run(["ip", "netns", "exec", first, "tc", "qdisc", "add", "dev", "eth0",
                                "root", "netem", "delay", delay, "rate", rate, "limit", "100000"],
                               capture_output=True, text=True)
        self.mode = "netem" if probe.returncode == 0 else "relay+tbf"
        for role, ns in self.ns.items():
            if self.mode == "netem":
                if ns != first:
                    self._ns(ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay",
                             delay, "rate", rate, "limit", "100000")
            else:
                self._ns(ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
                         "burst", "256kb", "latency", "200ms")
        if self.mode == "relay+tbf":
            routes = [f"--route={self.hub_addr}:{self.relay_port(a, b)}="
                      f"{self.addr[b]}:{self.port(b)}"
                      for a in self.ROLES for b in self.ROLES if a != b]
            self.relay = subprocess.Popen(
                ["ip", "netns", "exec", self.hub, sys.executable, str(ROOT / "bench" /
                                                                      "e2e_relay.py"),
                 "--delay-ms", f"{self.rtt_ms / 2:g}", f"--echo={self.hub_addr}:51999", *routes],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)
            assert self.relay.stdout is not None
            line = self.relay.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"the delay relay did not start: {line!r}")

    def address(self, role: str) -> str:
        """Where ``role`` listens (inside its namespace)."""
        return f"{self.addr[role]}:{self.port(role)}"

    def peer_address(self, role: str, peer: str) -> str:
        """Where ``role`` reaches ``peer``: directly (netem) or through the relay."""
        if self.mode == "netem":
            return self.address(peer)
        return f"{self.hub_addr}:{self.relay_port(role, peer)}"

    def exec_prefix(self, role: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[role]]

    def describe(self) -> str:
        return f"{self.rtt_ms:g} ms RTT, {self.rate_mbit:g} Mbit/s ({self.mode})"

    def round_trip_ms(self, role: str) -> float | None:
        """A measured round trip from ``role``'s namespace: TCP through the relay's echo port
        (relay mode) or ICMP to another party (netem mode): a check that the link is what it
        says."""
        if self.mode == "netem":
            other = next(r for r in self.ROLES if r != role)
            p = subprocess.run(self.exec_prefix(role) + ["ping", "-c", "3", "-q",
                                                         self.addr[other]],
                               capture_output=True, text=True)
            for line in p.stdout.splitlines():
                if "min/avg/max" in line:
                    return float(line.split("=")[1].split("/")[1])
            return None
        code = ("import socket,time;s=socket.create_connection(('%s',51999));t=[]\n"
                "for _ in range(5):\n t0=time.perf_counter();s.sendall(b'x');s.recv(1);"
                "t.append(time.perf_counter()-t0)\nprint(min(t)*1000)" % self.hub_addr)
        p = subprocess.run(self.exec_prefix(role) + [sys.executable, "-c", code],
                           capture_output=True, text=True, timeout=30)
        try:
            return float(p.stdout.strip())
        except ValueError:
            return None

    def close(self) -> None:
        if self.relay is not None:
            _kill_group(self.relay)
            self.relay = None
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made.clear()


# ------------------------------------------------------------------------------ report
def counting_table(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Elements per party per epoch of the ops that cost (one line per row and party)."""
    out = []
    for r in rows:
        if r.get("status") != "ok" or "parties" not in r:
            continue
        for role, p in r["parties"].items():
            line = {"impl": r["impl"], "key_bits": r["key_bits"], "overlap": r.get("overlap"),
                    "link": r["link"], "party": role, **p.get("elements_per_epoch", {})}
            if "encrypt_per_epoch" in p:
                line.update({f"kit encrypt {k}": v for k, v in p["encrypt_per_epoch"].items()})
            out.append(line)
    return out


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    print("\n" + "=" * 110)
    print(f"{'implementation':48} {'bits':>5} {'placement':18} {'link':12} {'ovl':>4} "
          f"{'wall s':>8} {'AUC':>7}  idle s per party")
    for r in rows:
        pl = "/".join(r.get("placement", {}).get(k, "") for k in ("guest", "host")
                      if k in r.get("placement", {}))
        if r.get("status") != "ok":
            print(f"{r['impl']:48} {r['key_bits']:>5} {pl:18} {r['link'][:12]:12} "
                  f"{str(r.get('overlap'))[:4]:>4}  {r.get('status')}: {r.get('reason', '')[:60]}")
            continue
        idle = ", ".join(f"{k} {v.get('idle_s', 0) or 0:.1f}"
                         for k, v in r.get("parties", {}).items() if v.get("idle_s") is not None)
        print(f"{r['impl']:48} {r['key_bits']:>5} {pl:18} {r['link'][:12]:12} "
              f"{str(r.get('overlap'))[:4]:>4} {r['wall_s']:8.1f} {r.get('auc') or 0:7.4f}  {idle}")
    print("=" * 110)


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if r.get("status") == "ok"]
    groups = sorted({(r["link"], r["key_bits"]) for r in ok})
    if not groups:
        return
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 1.2 + 0.45 * max(
        sum(1 for r in ok if (r["link"], r["key_bits"]) == g) for g in groups) * len(groups)),
        squeeze=False)
    for ax, g in zip(axes[:, 0], groups):
        sel = [r for r in ok if (r["link"], r["key_bits"]) == g]
        labels, walls, idles = [], [], []
        for r in sel:
            pl = "/".join(r["placement"].get(k, "") for k in ("guest", "host"))
            ovl = ("" if r.get("overlap") is None
                   else " overlap" if r["overlap"] else " no overlap")
            ovl += ", 1 CPU each" if r.get("cpus") else ""
            labels.append(f"{r['impl']} [{pl}]{ovl}")
            walls.append(r["wall_s"])
            idles.append(r.get("parties", {}).get("guest", {}).get("idle_s") or 0.0)
        y = range(len(sel))
        ax.barh(y, walls, color="#4c72b0", label="wall (guest)")
        ax.barh(y, idles, color="#dd8452", alpha=0.8, label="guest idle on peers")
        for i, r in enumerate(sel):
            ax.text(walls[i], i, f" {walls[i]:.1f} s, AUC {r.get('auc') or 0:.4f}", va="center",
                    fontsize=8)
        ax.set_yticks(list(y))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds")
        ax.set_title(f"default_credit vertical LR, {g[1]}-bit keys, {g[0]}", fontsize=10)
        ax.set_xlim(0, max(walls) * 1.45)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------ main
def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--key-bits", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rows", type=int, default=0, help="subsample (0: all 30,000 rows)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                   help="our jobs (-djn: with the DJN fixed-base option)")
    p.add_argument("--placements", nargs="+", default=["native,native", "gpu,native", "gpu,gpu"],
                   help="GUEST,HOST backends (the arbiter runs native)")
    p.add_argument("--fate-kinds", nargs="*", default=["paillier", "unifl"],
                   choices=["paillier", "unifl", "unifl-obfuscated"])
    p.add_argument("--fate-python", default=None, help="FATE's interpreter (default .venv-fate)")
    p.add_argument("--link", choices=["loopback", "netem", "both"], default="loopback")
    p.add_argument("--rtt-ms", type=float, default=20.0)
    p.add_argument("--rate-mbit", type=float, default=100.0)
    p.add_argument("--pin-cpus", action="store_true",
                   help="on the emulated link, each party of our jobs on a CPU of its own "
                        "(taskset; native threads 1), as if on separate machines")
    p.add_argument("--overlap", nargs="+", default=None, choices=["on", "off"],
                   help="loopback default: on; netem default: off on")
    p.add_argument("--budget-s", type=float, default=4 * 3600.0)
    p.add_argument("--job-timeout-s", type=float, default=1800.0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--dispatch", choices=["off", "auto", "calibrated"], default=None,
                   help="each party's dispatch.mode: size-aware dispatch between its accelerator "
                        "and its CPU backend (calibrated: cost models from the cache, measured "
                        "where missing); default off, calibrated with --gpu")
    p.add_argument("--warm-up", action="store_true",
                   help="first run each placement with an accelerator once, small (3,000 rows, "
                        "1 epoch, every key size; recorded apart), so that the rows measure a "
                        "machine's next jobs: the kernel timing and the dispatch lines cached")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="run each party of our jobs under cProfile; DIR gets each one's costliest "
                        "calls as text")
    p.add_argument("--quick", action="store_true",
                   help="validation run: 3,000 rows, 1 epoch, 1024-bit keys")
    p.add_argument("--gpu", action="store_true",
                   help="the GPU rows (bench/gpu_checks.sh): 1024- and 2048-bit keys, 2 epochs, "
                        "our jobs on (native, native), (gpu, gpu), (gpu, native), dispatch "
                        "calibrated, after a warm-up; no FATE")
    a = p.parse_args(argv)
    if a.quick:
        a.rows, a.epochs, a.key_bits = a.rows or 3000, 1, [1024]
    if a.gpu:
        a.key_bits, a.epochs, a.fate_kinds, a.warm_up = [1024, 2048], 2, [], True
        a.variants = ["two-party", "arbiter"]
        a.placements = ["native,native", "gpu,gpu", "gpu,native"]
        a.dispatch = a.dispatch or "calibrated"
    a.dispatch = a.dispatch or "off"
    return a


WARM_UP_ROWS = 3000


def warm_up(a: argparse.Namespace, data_dir: Path, work_root: Path, budget: Budget
            ) -> list[dict[str, Any]]:
    """One small two-party job per placement with an accelerator and per key size (``--warm-up``):
    what a machine's first job measures once -- the GPU kernels' timing, the dispatch lines --
    lands in the private caches, so the measured rows are next jobs.  Their rows, kept apart."""
    out: list[dict[str, Any]] = []
    placements = [pl for pl in a.placements if any(b != "native" for b in pl.split(","))]
    for pl in placements:
        gb, hb = pl.split(",")
        if any(backend_missing(b) for b in {gb, hb}):
            continue
        for bits in a.key_bits:
            timeout = budget.job_timeout()
            if timeout is None:
                return out
            say(f"warm-up {pl}, {bits}-bit ({WARM_UP_ROWS} rows, 1 epoch)")
            row = run_ours("two-party", {"guest": gb, "host": hb, "arbiter": "native"}, bits, 1,
                           WARM_UP_ROWS, None, data_dir, work_root / f"warm-{gb}-{hb}-{bits}",
                           min(timeout, 300.0), dispatch=a.dispatch)
            say(f"warm-up {pl}, {bits}-bit: {row['status']}"
                + (f", {row['wall_s']:.1f} s" if row["status"] == "ok" else
                   f": {row.get('reason')}"))
            out.append(row)
    return out


def _plan(a: argparse.Namespace) -> Iterator[tuple[str, dict[str, Any]]]:
    """(link, spec) of every row, in run order: per key size our jobs, then FATE's."""
    links = ["loopback", "netem"] if a.link == "both" else [a.link]
    for link in links:
        default_ovl = ["on"] if link == "loopback" else ["off", "on"]
        for bits in a.key_bits:
            for variant in a.variants:
                for pl in a.placements:
                    gb, hb = pl.split(",")
                    for ovl in a.overlap or default_ovl:
                        yield link, {"kind": "ours", "variant": variant, "bits": bits,
                                     "placement": {"guest": gb, "host": hb, "arbiter": "native"},
                                     "overlap": ovl == "on"}
            if link == "loopback":
                for kind in a.fate_kinds:
                    yield link, {"kind": "fate", "fate_kind": kind, "bits": bits}


def main(argv: Sequence[str] | None = None) -> int:
    a = _args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(a.budget_s, a.job_timeout_s)
    data_dir = find_data_dir(a.data_dir)
    overlap_known = has_overlap_param()
    work_root = Path(tempfile.mkdtemp(prefix="unifl-e2e-"))
    say(f"bench_e2e: data {data_dir}, rows {a.rows or 'all'}, {a.epochs} epoch(s), keys "
        f"{a.key_bits}, budget {a.budget_s:.0f} s, work {work_root}")
    split = prepare_split(data_dir, a.rows, a.epochs, work_root)
    say(f"split: {split.n_train} training rows, {split.n_test} held-out rows; plaintext "
        f"reference AUC {split.reference_auc:.6f}")
    py = fate_python(a.fate_python)
    plan = list(_plan(a))
    rows: list[dict[str, Any]] = []
    warm_rows = warm_up(a, data_dir, work_root, budget) if a.warm_up else []
    lab: NetnsLab | None = None
    result: dict[str, Any] = {
        "bench": "bench_e2e", "argv": sys.argv[1:] if argv is None else list(argv),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "processor": platform.processor(), "load_at_start": os.getloadavg()},
        "data_dir": str(data_dir), "train_rows": split.n_train, "test_rows": split.n_test,
        "reference_auc": split.reference_auc, "rows": rows, "warm_up": warm_rows}
    try:
        for i, (link, spec) in enumerate(plan, 1):
            bits = spec["bits"]
            label = (f"unifl {spec['variant']} {spec['placement']['guest']}/"
                     f"{spec['placement']['host']} overlap {'on' if spec['overlap'] else 'off'}"
                     if spec["kind"] == "ours" else f"FATE {spec['fate_kind']}")
            label = f"{label}, {bits}-bit, {link}"
            timeout = budget.job_timeout()
            skip = None
            if timeout is None:
                skip = f"out of the time budget ({a.budget_s:.0f} s)"
            elif spec["kind"] == "ours":
                missing = [b for b in set(spec["placement"].values()) if backend_missing(b)]
                if missing:
                    skip = "; ".join(f"no {b} here: {backend_missing(b)}" for b in missing)
                elif link == "netem" and lab is None:
                    why = NetnsLab.unavailable()
                    if why is None:
                        lab = NetnsLab(a.rtt_ms, a.rate_mbit)
                        rtt = lab.round_trip_ms("guest")
                        result["link"] = {"rtt_ms": a.rtt_ms, "rate_mbit": a.rate_mbit,
                                          "mode": lab.mode, "measured_round_trip_ms": rtt}
                        say(f"emulated link up ({lab.describe()}): measured round trip "
                            f"{rtt} ms")
                    else:
                        skip = f"no emulated link: {why}"
            elif py is None:
                skip = "FATE's venv not found (make .venv-fate/.fate-installed, or --fate-python)"
            if skip:
                row = ({"impl": f"unifl {spec['variant']}", "placement": spec["placement"],
                        "overlap": spec["overlap"]} if spec["kind"] == "ours"
                       else {"impl": f"FATE 2.2 {spec['fate_kind']}"})
                row.update(key_bits=bits, link=link, status="skipped", reason=skip)
                rows.append(row)
                say(f"row {i}/{len(plan)} {label}: skipped ({skip})")
                continue
            assert timeout is not None
            say(f"row {i}/{len(plan)} {label}: running (at most {timeout:.0f} s)")
            work = work_root / f"row{i:02d}"
            if spec["kind"] == "ours":
                row = run_ours(spec["variant"], spec["placement"], bits, a.epochs, a.rows,
                               spec["overlap"] if overlap_known else None, data_dir, work,
                               timeout, lab if link == "netem" else None,
                               a.pin_cpus and link == "netem",
                               Path(a.profile) if a.profile else None, a.dispatch)
            else:
                assert py is not None
                row = run_fate(spec["fate_kind"], bits, a.epochs, split, py, work, timeout)
            row["reference_auc"] = split.reference_auc
            rows.append(row)
            if row["status"] == "ok":
                idle = {k: round(v.get("idle_s") or 0, 1) for k, v in row.get("parties", {}).items()
                        if v.get("idle_s") is not None}
                say(f"row {i}/{len(plan)} {label}: {row['wall_s']:.1f} s, AUC {row['auc']:.6f}"
                    + (f", idle {idle}" if idle else ""))
            else:
                say(f"row {i}/{len(plan)} {label}: {row['status']}: {row.get('reason')}")
            _save(result, out)
    finally:
        if lab is not None:
            lab.close()
        result["counting"] = counting_table(rows)
        result["elapsed_s"] = time.monotonic() - T0
        _save(result, out)
        try:
            plot(rows, out / "bench_e2e.png")
        except Exception as exc:   # noqa: BLE001 -- the JSON is the result; the plot is a view
            say(f"plot failed: {exc}")
        shutil.rmtree(work_root, ignore_errors=True)
    print_table(rows)
    say(f"wrote {out / 'bench_e2e.json'} and {out / 'bench_e2e.png'}")
    return 0 if all(r["status"] != "failed" for r in rows) else 1


def _save(result: dict[str, Any], out: Path) -> None:
    tmp = out / "bench_e2e.json.tmp"
    tmp.write_text(json.dumps(result, indent=1, default=str))
    tmp.replace(out / "bench_e2e.json")


if __name__ == "__main__":
    sys.exit(main())
