"""The main job, ``unifl demo``: guest and host as two processes on localhost, each on the hardware
its YAML names (default: guest on ``fpga``, host on ``qat``, both falling back to native then cpu),
PSI-RSA on the ids and then vertical LR (LinR for motor) on the intersection; a FLASH Table 1 style
report of what ran where.

Each party is ``python -m unifl run --config ... --job ...`` (exactly what a user runs on two
machines); this module only picks free loopback ports, writes the job, makes a throwaway PKI (a CA
and one certificate per role, :mod:`unifl.app.transport.pki`) and a copy of each party's YAML with
``network.tls`` pointing at it, starts the processes, watches them, and renders their JSON
results.  Every party runs over mutual TLS even on the loopback: it is the deployment to copy, and
horizontal LR sends the clients' private key from guest to host, which needs an authenticated,
encrypted link.  A party that dies makes the other fail within its
receive timeout; the demo then stops both and shows each one's error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import yaml

from .app.params import PARAMS, load_job
from .configs import load_party
from .core.errors import ConfigError, UniflError

if TYPE_CHECKING:
    from rich.console import Console

DEMO_JOBS = {"breast": "demo_vlr_breast.yaml", "motor": "demo_vlinr_motor.yaml",
             "default_credit": "demo_vlr_default_credit.yaml"}
#: the shipped job whose params fit an algorithm given with --algorithm
ALGORITHM_JOBS = {"psi": "demo_psi_breast.yaml", "secureboost": "demo_secureboost_breast.yaml",
                  "hlr": "demo_hlr_breast.yaml", "vlinr": "demo_vlinr_motor.yaml",
                  "psi+vlinr": "demo_vlinr_motor.yaml"}
START_ORDER = ("arbiter", "host", "guest")     # servers first; the guest drives the job


class DemoFailed(UniflError, RuntimeError):
    """A party process of the demo failed; ``errors`` maps role -> its error message."""

    def __init__(self, msg: str, errors: dict[str, str]):
        super().__init__(msg)
        self.errors = errors


@dataclass
class DemoOptions:
    dataset: str = "breast"
    algorithm: str | None = None
    guest_config: str = "guest_fpga.yaml"
    host_config: str = "host_qat.yaml"
    arbiter_config: str = "arbiter_cpu.yaml"
    key_bits: int | None = None
    epochs: int | None = None
    timeout: float | None = None
    data_dir: str | None = None
    job: str | None = None
    workdir: str | None = None
    progress: bool = True
    extra_params: dict[str, Any] = field(default_factory=dict)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job_file(opts: DemoOptions) -> str:
    if opts.job:
        return opts.job
    if opts.dataset not in DEMO_JOBS:
        raise ConfigError(f"--dataset must be one of {sorted(DEMO_JOBS)}, got {opts.dataset!r}")
    if opts.algorithm in ALGORITHM_JOBS:
        return ALGORITHM_JOBS[opts.algorithm]
    if opts.algorithm in ("vlr", "psi+vlr") and opts.dataset == "motor":
        return "demo_vlr_breast.yaml"
    return DEMO_JOBS[opts.dataset]


def prepare_job(opts: DemoOptions, run_dir: Path) -> Path:
    """Write the job file every party runs: the shipped demo job that fits the dataset and the
    algorithm, with the options applied (``--epochs``: epochs; rounds for hlr, trees for
    secureboost).  A shipped job run as a related algorithm (``psi+vlr``'s file as ``vlr``) keeps
    only the parameters that algorithm has (no PSI step: no ``drop_fraction``)."""
    job = load_job(_job_file(opts)).to_job()
    if opts.job is None and job["dataset"] != opts.dataset:
        # the declared feature and id counts are the shipped job's dataset's: on another dataset
        # the parties run without them (and each logs that nothing pins the peer's counts)
        job["dataset"] = opts.dataset
        for declared in ("features", "max_ids"):
            job["params"].pop(declared, None)
    if opts.algorithm and opts.algorithm != job["algorithm"]:
        if opts.algorithm not in PARAMS:
            raise ConfigError(f"--algorithm must be one of {sorted(PARAMS)}, got "
                              f"{opts.algorithm!r}")
        fields = PARAMS[opts.algorithm].model_fields
        job["algorithm"] = opts.algorithm
        job["params"] = {k: v for k, v in job["params"].items() if k in fields}
    if opts.key_bits:
        job["key_bits"] = opts.key_bits
    if opts.epochs is not None:
        key = {"secureboost": "n_trees", "hlr": "rounds"}.get(job["algorithm"], "epochs")
        if job["algorithm"] != "psi":
            job["params"][key] = opts.epochs
    job["params"].update(opts.extra_params)
    path = run_dir / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    load_job(path)       # validate what the parties will read
    return path


def tls_party_configs(configs: dict[str, str], run_dir: Path) -> dict[str, Path]:
    """For each role, a copy of its party YAML in ``run_dir`` whose ``network.tls`` names the
    certificates of a throwaway demo PKI made in ``run_dir/pki`` (role -> the copy's path)."""
    from .app.transport.pki import make_demo_pki
    from .configs import resolve
    pki = make_demo_pki(run_dir / "pki", tuple(configs))
    out = {}
    for role, config in configs.items():
        data = yaml.safe_load(resolve(config).read_text())
        tls = pki[role]
        data["network"] = {**(data.get("network") or {}),
                           "tls": {"cert": tls.cert, "key": tls.key, "ca": tls.ca}}
        path = run_dir / f"{role}.party.yaml"
        path.write_text(f"# {config} with mutual TLS from the demo's throwaway PKI\n"
                        + yaml.safe_dump(data, sort_keys=False))
        load_party(path)     # validate what the party will read
        out[role] = path
    return out


def _party_cmd(role: str, config: str, job: Path, run_dir: Path, ports: dict[str, int],
               opts: DemoOptions, progress: bool) -> list[str]:
    cmd = [sys.executable, "-m", "unifl", "run", "--config", config, "--job", str(job),
           "--listen", f"127.0.0.1:{ports[role]}", "--json-out", str(run_dir / f"{role}.json"),
           "--no-table"]
    for peer, port in ports.items():
        if peer != role:
            cmd += ["--peer", f"{peer}=127.0.0.1:{port}"]
    if opts.key_bits:
        cmd += ["--key-bits", str(opts.key_bits)]
    if opts.timeout:
        cmd += ["--timeout", str(opts.timeout)]
    if opts.data_dir:
        cmd += ["--data-dir", opts.data_dir]
    if not progress:
        cmd.append("--no-progress")
    return cmd


def run_demo(opts: DemoOptions, console: Console | None = None,
             on_start: Callable[[dict[str, int], Path], None] | None = None) -> dict[str, dict]:
    """Run every party of the job (guest and host; the arbiter too when the job has one) as its
    own process; return {role: result}.  Raises DemoFailed."""
    run_dir = Path(opts.workdir or tempfile.mkdtemp(prefix="unifl-demo-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    job = prepare_job(opts, run_dir)
    roles: list[str] = [r for r in START_ORDER if r in load_job(job).parties]
    configs = {"guest": opts.guest_config, "host": opts.host_config,
               "arbiter": opts.arbiter_config}
    for role in roles:
        cfg = load_party(configs[role])     # config errors surface here, before any process
        if cfg.party != role:
            raise ConfigError(f"{configs[role]}: this is a {cfg.party} config, the demo needs "
                              f"a {role}")
    party_files = tls_party_configs({r: configs[r] for r in roles}, run_dir)
    ports = {r: free_port() for r in roles}
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])      # this checkout, even if not installed
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    tty = bool(console is not None and console.is_terminal)
    procs: dict[str, subprocess.Popen] = {}
    logs: dict[str, Path] = {}
    try:
        for role in roles:
            show = role == "guest" and opts.progress and tty   # the guest's bars on the terminal
            cmd = _party_cmd(role, str(party_files[role]), job, run_dir, ports, opts,
                             progress=show or not tty)
            logs[role] = run_dir / f"{role}.log"
            out = None if show else open(logs[role], "w")
            procs[role] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if out else None,
                                           env=env, start_new_session=True)
            if out:
                out.close()
        if on_start:
            on_start({r: p.pid for r, p in procs.items()}, run_dir)
        _wait(procs, opts)
    except BaseException:
        for p in procs.values():
            _kill(p)
        raise
    results, errors = {}, {}
    for role, p in procs.items():
        path = run_dir / f"{role}.json"
        data = json.loads(path.read_text()) if path.is_file() else None
        if p.returncode == 0 and data and "error" not in data:
            results[role] = data
        else:
            errors[role] = _error_of(role, p.returncode, data, logs.get(role))
    if errors:
        raise DemoFailed("; ".join(f"{r}: {m}" for r, m in errors.items()), errors)
    return results


def _wait(procs: dict[str, subprocess.Popen], opts: DemoOptions) -> None:
    """Until both exit.  Once one has failed, the other gets its receive timeout (plus a margin) to
    notice and fail by itself with a named error, then it is stopped."""
    grace = (opts.timeout or 120.0) + 15.0
    failed_at = None
    while True:
        codes = {r: p.poll() for r, p in procs.items()}
        if all(c is not None for c in codes.values()):
            return
        if failed_at is None and any(c not in (None, 0) for c in codes.values()):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace:
            for p in procs.values():
                _kill(p)
            return
        time.sleep(0.1)


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)     # its own session: the party and nothing else
        except (ProcessLookupError, PermissionError):
            p.kill()
        p.wait(10)


def _error_of(role: str, code: int | None, data: dict | None, log: Path | None) -> str:
    if data and "error" in data:
        return f"{data['error']['type']}: {data['error']['message']}"
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    tail = ""
    if log is not None and log.is_file():
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        tail = lines[-1] if lines else ""
    return f"exited with code {code}" + (f": {tail}" if tail else "")
