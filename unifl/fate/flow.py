"""UniFL's FATE components as real FATE-Flow 2.2 jobs: provider folder, server control, job submission.

What FATE-Flow 2.2.0 honours (verified on its sources and by running it, lab-notes/fate-flow-2.2.0.md):

* A task runs on a *provider*: an interpreter (``metadata.venv``) and a folder put first on the
  worker's ``PYTHONPATH`` (``metadata.path``).  FATE-Flow only knows how to launch providers named
  ``fate`` (or its own ``fate_flow``), so UniFL registers ``fate:<FATE version>-unifl@local``.
* Inside the task FATE resolves a component name through the ``fate.ext.component_desc`` entry point
  (pkg_resources).  unifl's own distribution metadata cannot serve there: it requires pydantic 2 and
  protobuf 5, which FATE's venv does not have, and pkg_resources checks requirements before loading an
  entry point.  So the provider folder carries a requirement-free ``unifl_fate_plugin-<version>.dist-info``
  (generated here from :data:`COMPONENTS` and ``unifl.__version__``) beside a link to the ``unifl`` package.

Everything FATE-specific (fate_client, the FATE-Flow venv) is imported or run lazily, so this module
imports in UniFL's own venv too.  Command line (in the FATE venv)::

    python -m unifl.fate.flow init   --home DIR [--port N]      # fate_flow init, once per venv
    python -m unifl.fate.flow start  --home DIR                 # 127.0.0.1, waits for the health URL
    python -m unifl.fate.flow provider --home DIR               # writes the provider folder, registers it
    python -m unifl.fate.flow upload --home DIR --dataset breast_hetero
    python -m unifl.fate.flow run    --home DIR --algo lr --kinds paillier unifl
    python -m unifl.fate.flow stop   --home DIR
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

import unifl

#: the FATE-Flow (and pyfate, fate_client) release this module drives
FATE_VERSION = "2.2.0"
#: FATE-Flow launches only providers named ``fate``; ours differs by version
PROVIDER_NAME = "fate"
PROVIDER_VERSION = f"{FATE_VERSION}-unifl"
PROVIDER_DEVICE = "local"
PROVIDER = f"{PROVIDER_NAME}:{PROVIDER_VERSION}@{PROVIDER_DEVICE}"
ENTRY_POINT_GROUP = "fate.ext.component_desc"
#: the FATE components of :mod:`unifl.fate.components` (pyproject.toml declares the same entry points;
#: tests/fate/test_flow.py checks that the two lists agree)
COMPONENTS = ("unifl_coordinated_lr", "unifl_coordinated_linr", "unifl_hetero_secureboost")
PLUGIN_DIST = "unifl_fate_plugin"
#: FATE's example data shipped with unifl.app (breast_hetero_*, default_credit_sample_hetero_*)
PACKAGED_DATA = Path(__file__).resolve().parent.parent / "app" / "data"
#: the parties of a standalone FATE-Flow (one server plays every party)
GUEST, HOST, ARBITER = "9999", "10000", "10000"
HOME_MARKER = ".unifl-fate-flow-home"
#: environment variable carrying the random token of a server this module started (and of every
#: task it launches, which inherit its environment): what makes a process provably ours to stop
TOKEN_VARIABLE = "UNIFL_FATE_FLOW_TOKEN"


class FateFlowError(RuntimeError):
    """A FATE-Flow server, provider or job problem, with the text that explains it."""


class FateFlowNotRunning(FateFlowError):
    """Nothing answers FATE-Flow's health URL."""


class ProviderNotRegistered(FateFlowError):
    """The server does not know UniFL's provider."""


class FateFlowJobFailed(FateFlowError):
    """A job ended in failure; ``task_errors`` holds each failed task's last error line."""

    def __init__(self, job_id: str, task_errors: list[str], detail: str = "") -> None:
        self.job_id = job_id
        self.task_errors = task_errors
        lines = "\n".join(f"  {e}" for e in task_errors) or "  (no task error report)"
        super().__init__(f"FATE-Flow job {job_id} failed{': ' + detail if detail else ''}\n{lines}")


# ---- private folders and files ------------------------------------------------------------------

def private_dir(path: Path, what: str) -> Path:
    """``path`` as a folder only this user can enter: made with mode 0700 when absent (its
    parents as usual), else checked to be a real folder (not a link), owned by this user, with no
    access for group or others.  :class:`FateFlowError` naming ``what`` otherwise: a folder another
    local user prepared (with a ``sitecustomize.py`` in it, say) is never used."""
    path = Path(os.path.abspath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    problem = ("is a link" if stat.S_ISLNK(st.st_mode) else
               "is not a folder" if not stat.S_ISDIR(st.st_mode) else
               f"belongs to uid {st.st_uid}, not this user ({os.geteuid()})"
               if st.st_uid != os.geteuid() else
               f"has mode {stat.S_IMODE(st.st_mode):o}: group or others may enter it"
               if st.st_mode & 0o077 else None)
    if problem:
        raise FateFlowError(f"the {what} {path} {problem}; it must be a private folder of this "
                            "user (mode 700) -- remove it or choose another place")
    return path


def _write_new(path: Path, text: str) -> None:
    """Write a new file (refused if anything, a link included, is already at ``path``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


# ---- the provider folder -----------------------------------------------------------------------

def entry_points_text() -> str:
    """``entry_points.txt`` of the plugin distribution: one line per UniFL component."""
    lines = [f"[{ENTRY_POINT_GROUP}]"]
    lines += [f"{name} = unifl.fate.components:{name}" for name in COMPONENTS]
    return "\n".join(lines) + "\n"


def write_provider_folder(folder: Path) -> Path:
    """Create (or refresh) the folder FATE-Flow puts first on a UniFL task's ``PYTHONPATH``.

    It holds ``unifl`` (a link to the package this module belongs to, so a rebuilt tree is picked
    up) and ``unifl_fate_plugin-<version>.dist-info`` with only METADATA and entry_points.txt: no
    requirements, so FATE's pkg_resources loads the components in FATE's venv.  Returns the folder.

    FATE-Flow puts this folder first on every task's path, so it must be private: made 0700, or
    refused when it exists as anything else (:func:`private_dir`).
    """
    folder = private_dir(folder, "provider folder")
    package = Path(unifl.__file__).resolve().parent
    link = folder / "unifl"
    if link.is_symlink() or link.exists():
        if link.is_symlink() and link.resolve() == package:
            pass
        elif link.is_symlink():
            link.unlink()
        else:
            raise FateFlowError(f"{link} exists and is not a link to the unifl package; remove it")
    if not link.is_symlink():
        link.symlink_to(package, target_is_directory=True)
    for stale in folder.glob(f"{PLUGIN_DIST}-*.dist-info"):   # another unifl version's shim
        shutil.rmtree(stale)
    dist = folder / f"{PLUGIN_DIST}-{unifl.__version__}.dist-info"
    dist.mkdir(mode=0o700)
    _write_new(dist / "METADATA",
               "Metadata-Version: 2.1\n"
               f"Name: {PLUGIN_DIST.replace('_', '-')}\n"
               f"Version: {unifl.__version__}\n"
               "Summary: FATE component entry points of UniFL, without requirements (FATE's venv "
               "pins pydantic 1; unifl itself is imported from the link beside this folder)\n")
    _write_new(dist / "entry_points.txt", entry_points_text())
    return folder


def provider_config(folder: Path, venv_python: str) -> dict[str, Any]:
    """The body of ``flow provider register -c`` for UniFL's provider."""
    return {"name": PROVIDER_NAME, "device": PROVIDER_DEVICE, "version": PROVIDER_VERSION,
            "metadata": {"path": str(folder.resolve()), "venv": venv_python}}


# ---- the server ---------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _proc_stat(pid: int) -> Optional[list[str]]:
    """The fields of /proc/<pid>/stat after the command name (state first); None when the process
    is gone or is a zombie."""
    try:
        text = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return None if not fields or fields[0] in ("Z", "X") else fields


def process_start_time(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks after boot (/proc/<pid>/stat field 22); None
    when there is no such live process.  With the pid it names one process for ever: a pid the
    system reuses belongs to a process that started later."""
    if not Path("/proc/self/stat").exists():
        raise FateFlowError("telling this module's FATE-Flow server apart from other processes "
                            "needs Linux's /proc; stop the server yourself")
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def carries_token(pid: int, token: str) -> bool:
    """Whether process ``pid`` has ``TOKEN_VARIABLE=token`` in its environment (readable only for
    this user's own processes, or by root)."""
    try:
        environ = Path(f"/proc/{int(pid)}/environ").read_bytes()
    except (OSError, ValueError):
        return False
    return f"{TOKEN_VARIABLE}={token}".encode() in environ.split(b"\0")


def processes_carrying(token: str) -> list[int]:
    """Every live process (this one aside) whose environment carries ``token``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() \
                and _proc_stat(int(entry.name)) is not None and carries_token(int(entry.name), token):
            out.append(int(entry.name))
    return out


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} not found)"
    return f"--- last {min(lines, len(text))} lines of {path} ---\n" + "\n".join(text[-lines:])


@dataclass
class FlowServer:
    """One standalone FATE-Flow server: its venv, its home directory and its address.

    ``fate_flow init`` writes the home into the venv's installed ``fate_flow/settings.py``, so one venv
    serves one home; :meth:`init` checks that binding and redoes it for this home when it differs.
    """

    home: Path
    venv_python: str = sys.executable
    host: str = "127.0.0.1"
    http_port: int = 9380
    grpc_port: int = 9360

    def __post_init__(self) -> None:
        # not resolved: a link at the home's own path is refused, not followed (make_home)
        self.home = Path(os.path.abspath(self.home))
        self.venv_python = os.path.abspath(self.venv_python)   # keep the venv's bin/python link

    # -- paths
    @property
    def venv_bin(self) -> Path:
        return Path(self.venv_python).parent

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}/v2"

    @property
    def pid_file(self) -> Path:
        return self.home / "fate_flow.pid"

    @property
    def error_log(self) -> Path:
        return self.home / "logs-error.log"

    @property
    def provider_folder(self) -> Path:
        """Inside the private home: FATE-Flow puts it first on every task's path."""
        return self.home / "provider"

    def make_home(self) -> Path:
        """The home as a private folder of this user (:func:`private_dir`)."""
        return private_dir(self.home, "FATE-Flow home")

    def _venv_run(self, code: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run([self.venv_python, "-c", code], capture_output=True, text=True,
                              env=env, timeout=120)
        if proc.returncode != 0:
            raise FateFlowError(f"{self.venv_python} cannot import FATE-Flow "
                                f"(pip install fate_flow=={FATE_VERSION}):\n{proc.stderr[-2000:]}")
        return proc.stdout.strip()

    def bound_conf_path(self) -> str:
        """The conf folder the venv's fate_flow settings point at ('' before any init)."""
        return self._venv_run("import fate_flow.settings as s; print(s.DEFAULT_SERVER_CONF_PATH)")

    # -- lifecycle
    def init(self) -> None:
        """``fate_flow init --ip --port --home`` unless the venv is already bound to this home."""
        conf = self.home / "conf"
        if self.bound_conf_path() == str(conf) and (conf / "service_conf.yaml").is_file():
            return
        if self.home.exists() and not (self.home / HOME_MARKER).exists() and any(self.home.iterdir()):
            raise FateFlowError(f"{self.home} is not empty and was not made by unifl.fate.flow; "
                                "choose another --home")
        self.make_home()
        if conf.exists():          # made for another venv binding: init copies it afresh
            shutil.rmtree(conf)
        if not (self.home / HOME_MARKER).exists():
            _write_new(self.home / HOME_MARKER, "FATE-Flow home made by python -m unifl.fate.flow\n")
        # `fate_flow init --ip --port --home`, except that the conf it starts from is the package's
        # own: the CLI reads the previously bound home's, which fails once that home is deleted
        code = ("import os, fate_flow.commands.server_cli as cli; "
                "cli.SERVER_CONF_PATH = os.path.join(cli.HOME, 'conf', 'service_conf.yaml'); "
                f"cli.init_server({self.host!r}, {int(self.http_port)}, {str(self.home)!r})")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run([self.venv_python, "-c", code], capture_output=True, text=True,
                              env=env, timeout=120)
        if proc.returncode != 0 or "completed" not in proc.stdout:
            raise FateFlowError(f"fate_flow init --home {self.home} failed:\n"
                                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")

    def write_ports(self) -> None:
        """Put host and ports into the home's service_conf.yaml (read by server and workers)."""
        path = self.home / "conf" / "service_conf.yaml"
        conf = yaml.safe_load(path.read_text())
        conf["fateflow"].update(host=self.host, http_port=self.http_port, grpc_port=self.grpc_port)
        path.write_text(yaml.safe_dump(conf, default_flow_style=False))

    def health(self, timeout: float = 5.0) -> dict[str, Any]:
        """The server's own status record; :class:`FateFlowNotRunning` when nothing answers."""
        try:
            answer = self._request("GET", "/server/fateflow", timeout=timeout)
        except (urllib.error.URLError, OSError) as exc:
            raise FateFlowNotRunning(
                f"FATE-Flow is not running at {self.url} ({getattr(exc, 'reason', exc)}); start it "
                f"with `python -m unifl.fate.flow start --home {self.home}`") from exc
        if answer.get("code") != 0:
            raise FateFlowError(f"FATE-Flow at {self.url} answers its health URL with {answer}")
        return dict(answer.get("data") or {})

    # -- the server's process: provably ours or left alone
    def _write_pid_record(self, pid: int, token: str) -> None:
        """The pid file: pid, start time and token, made once (O_EXCL, no link followed) in the
        private home."""
        _write_new(self.pid_file, json.dumps({"pid": pid, "start_time": process_start_time(pid),
                                              "token": token}))

    def _pid_record(self) -> Optional[dict[str, Any]]:
        """The pid file's record when it is a regular file of this user holding one; else None."""
        try:
            fd = os.open(self.pid_file, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return None
            try:
                record = json.loads(f.read(4096))
            except ValueError:
                return None
        ok = (isinstance(record, dict) and type(record.get("pid")) is int
              and type(record.get("start_time")) is int and isinstance(record.get("token"), str))
        return record if ok else None

    def running_pid(self) -> Optional[int]:
        """The pid of the server this home's pid file records, when that process is provably it:
        alive, started at the recorded time, and carrying the recorded token in its environment.
        None otherwise (no server, or a stale or planted pid file)."""
        record = self._pid_record()
        if record is None:
            return None
        pid = record["pid"]
        if process_start_time(pid) != record["start_time"] or not carries_token(pid, record["token"]):
            return None
        return pid

    def launch(self, argv: Sequence[str], env: dict[str, str], stdout: Path,
               stderr: Optional[Path] = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` in a session of its own, in the home, with a fresh token in its
        environment, and record it in the pid file (what :meth:`stop` will check)."""
        token = secrets.token_hex(16)
        env = {**env, TOKEN_VARIABLE: token}
        with open(stdout, "ab") as out, open(stderr or stdout, "ab") as err:
            proc = subprocess.Popen(list(argv), cwd=self.home, env=env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._write_pid_record(proc.pid, token)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        return proc

    def start(self, worker_env: Optional[dict[str, str]] = None, timeout: float = 120.0) -> float:
        """Start the server in the background and wait for its health URL; returns seconds taken.

        The server gets this process's environment without ``PYTHONPATH`` and ``UNIFL_*`` (so it never
        imports the plugin itself) plus ``worker_env``: FATE-Flow copies its environment into every
        task it launches, which is how a party's ``UNIFL_BACKEND`` / ``UNIFL_CONFIG`` reach the kit.
        """
        if self.running_pid() is not None:
            raise FateFlowError(f"a FATE-Flow server of {self.home} already runs "
                                f"(pid {self.running_pid()}); stop it first")
        for port in (self.http_port, self.grpc_port):
            if _port_in_use(self.host, port):
                raise FateFlowError(f"port {self.host}:{port} is taken by another program; "
                                    "pass other ports (--port/--grpc-port, 0 = any free port)")
        self.write_ports()
        env = {k: v for k, v in os.environ.items()
               if k != "PYTHONPATH" and not k.startswith("UNIFL_")}
        env.update(worker_env or {})
        env["PATH"] = f"{self.venv_bin}{os.pathsep}{env.get('PATH', '')}"
        server = Path(self._venv_run("import fate_flow, os; print(os.path.dirname(fate_flow.__file__))"))
        self.make_home()
        if self.pid_file.exists() or self.pid_file.is_symlink():
            self.pid_file.unlink()       # a stale record (running_pid said no server runs)
        t0 = time.monotonic()
        proc = self.launch([self.venv_python, str(server / "fate_flow_server.py")], env,
                           self.home / "logs-console.log", self.error_log)
        while True:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise FateFlowError(f"FATE-Flow exited with {proc.returncode} while starting\n"
                                    + _tail(self.error_log))
            try:
                self.health(timeout=2.0)
                break
            except FateFlowNotRunning:
                pass
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise FateFlowError(f"FATE-Flow did not answer {self.url} within {timeout:.0f} s\n"
                                    + _tail(self.error_log))
            time.sleep(0.5)
        # fate_client's pipeline reads the server address from its settings.yaml (`flow init` writes it)
        subprocess.run([str(self.venv_bin / "flow"), "init", "--ip", self.host, "--port",
                        str(self.http_port)], capture_output=True, text=True, timeout=120, check=True)
        return time.monotonic() - t0

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM the recorded server (SIGKILL after ``timeout``), then SIGKILL every process that
        carries its token (the tasks it launched); True if it was running.  Only a process that is
        provably the server (:meth:`running_pid`) or one of its tasks is ever signalled: a stale or
        planted pid file is removed and nothing is killed."""
        record = self._pid_record()
        pid = self.running_pid()
        if pid is None or record is None:
            if record is not None or self.pid_file.is_symlink():
                self.pid_file.unlink()
            return False
        token = record["token"]
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process_start_time(pid) == record["start_time"]:
            time.sleep(0.2)
        if self.running_pid() == pid:
            os.kill(pid, signal.SIGKILL)
        for other in processes_carrying(token):     # tasks left behind, wherever their session
            try:
                os.kill(other, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.pid_file.unlink(missing_ok=True)
        deadline = time.monotonic() + timeout       # SIGKILL is asynchronous: wait for the exits
        while time.monotonic() < deadline and (
                processes_carrying(token)
                or any(_port_in_use(self.host, port) for port in (self.http_port, self.grpc_port))):
            time.sleep(0.2)
        for port in (self.http_port, self.grpc_port):
            if _port_in_use(self.host, port):
                raise FateFlowError(f"FATE-Flow stopped but {self.host}:{port} is still bound")
        return True

    # -- HTTP API (the calls fate_client's FlowClient makes, on the standard library)
    def _request(self, method: str, path: str, params: Optional[dict[str, Any]] = None,
                 body: Optional[dict[str, Any]] = None, timeout: float = 30.0) -> dict[str, Any]:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return dict(json.loads(resp.read().decode()))

    def api(self, method: str, path: str, params: Optional[dict[str, Any]] = None,
            body: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """One FATE-Flow v2 API call; :class:`FateFlowNotRunning` when the server is down."""
        try:
            return self._request(method, path, params, body)
        except (urllib.error.URLError, ConnectionError) as exc:
            raise FateFlowNotRunning(f"FATE-Flow is not running at {self.url} "
                                     f"({getattr(exc, 'reason', exc)})") from exc

    def register_provider(self, folder: Optional[Path] = None) -> dict[str, Any]:
        """Write the provider folder and register it (``flow provider register``); returns the config."""
        config = provider_config(write_provider_folder(folder or self.provider_folder),
                                 self.venv_python)
        answer = self.api("POST", "/provider/register", body=config)
        if answer.get("code") != 0:
            raise FateFlowError(f"FATE-Flow refused provider {PROVIDER}: {answer}")
        self.require_provider()
        return config

    def require_provider(self, provider: str = PROVIDER) -> dict[str, Any]:
        """The server's record of ``provider`` (name:version@device); :class:`ProviderNotRegistered`."""
        m = re.fullmatch(r"([^:@]+):([^@]+)@(\w+)", provider)
        if not m:
            raise ValueError(f"provider {provider!r} is not of the form name:version@device")
        name, version, device = m.groups()
        rows = self.api("GET", "/provider/query", {"name": name, "version": version,
                                                   "device": device}).get("data") or []
        if not rows:
            raise ProviderNotRegistered(
                f"FATE-Flow at {self.url} has no provider {provider}: run "
                f"`python -m unifl.fate.flow provider --home {self.home}` (registers "
                f"{PROVIDER} with the UniFL provider folder) before submitting unifl_* components")
        if name != PROVIDER_NAME and name != "fate_flow":
            raise FateFlowError(f"provider {provider}: FATE-Flow {FATE_VERSION} launches only "
                                "providers named 'fate' or 'fate_flow'")
        return dict(rows[0])

    def tasks(self, job_id: str) -> list[dict[str, Any]]:
        return list(self.api("GET", "/job/task/query", {"job_id": job_id}).get("data") or [])

    def task_errors(self, job_id: str) -> list[str]:
        """``task role:party: last error line`` for every failed task of a job (fate_client only says
        'Job is failed'; the worker's traceback is in the task's error_report)."""
        errors = []
        for t in self.tasks(job_id):
            report = (t.get("error_report") or "").strip()
            if t.get("status") == "failed" and report:
                last = [line for line in report.splitlines() if line.strip()][-1]
                errors.append(f"{t['task_name']} {t['role']}:{t['party_id']}: {last.strip()}")
        return errors


# ---- data and jobs (fate_client's pipeline) -----------------------------------------------------

def _fate_client(module: str) -> Any:
    try:
        return importlib.import_module(f"fate_client.{module}")
    except ImportError as exc:
        raise FateFlowError(f"fate_client {FATE_VERSION} is not installed in {sys.executable} "
                            f"(pip install --no-deps fate_client=={FATE_VERSION})") from exc


def _point_client(server: FlowServer) -> None:
    """Aim fate_client's pipeline at ``server`` in this process, whatever its settings.yaml says."""
    flow_config = _fate_client("pipeline.conf.env_config").FlowConfig
    flow_config.IP, flow_config.PORT = server.host, server.http_port


def upload(server: FlowServer, dataset: str, data_dir: Path = PACKAGED_DATA,
           namespace: str = "experiment") -> dict[str, float]:
    """Upload ``<dataset>_{guest,host}.csv`` as FATE tables ``namespace/<dataset>_<role>`` (FATE 2.2's
    upload + dataframe transformer job); returns seconds per role.  The guest file holds the label y."""
    server.health()
    _point_client(server)
    pipeline_mod = _fate_client("pipeline")
    base = {"delimiter": ",", "dtype": "float32", "input_format": "dense", "match_id_name": "id",
            "match_id_range": 0, "tag_value_delimiter": ":", "tag_with_value": False,
            "weight_type": "float32"}
    seconds = {}
    for role, extra in (("guest", {"label_type": "int32", "label_name": "y"}), ("host", {})):
        path = Path(data_dir) / f"{dataset}_{role}.csv"
        if not path.is_file():
            raise FileNotFoundError(f"no data file {path}")
        t0 = time.monotonic()
        p = pipeline_mod.FateFlowPipeline().set_parties(local="0")
        p.set_site_role("local")
        p.set_site_party_id("0")
        p.transform_local_file_to_dataframe(file=str(path), meta={**base, **extra}, head=True,
                                            extend_sid=True, namespace=namespace,
                                            name=f"{dataset}_{role}")
        seconds[role] = time.monotonic() - t0
    return seconds


@dataclass
class ModelSpec:
    """One model task of a job: the algorithm, the PHE kind and FATE's parameters for it."""

    algo: str                      # "lr" (coordinated LR) or "sbt" (hetero SecureBoost)
    kind: str                      # he_param.kind: "paillier" (FATE's kit) or "unifl"
    key_length: int = 1024
    epochs: int = 3
    trees: int = 3
    depth: int = 3

    @property
    def task_name(self) -> str:
        return f"{self.algo}_{self.kind}"


@dataclass
class ModelResult:
    task_name: str
    algo: str
    kind: str
    component: str
    provider: Optional[str]
    auc: float
    guest_task_s: float            # FATE-Flow's elapsed time of the guest's task (worker start included)
    task_s: dict[str, float] = field(default_factory=dict)


@dataclass
class JobResult:
    job_id: str
    dataset: str
    wall_s: float                  # submit to success, as fate_client's pipeline.fit() waits
    models: list[ModelResult]
    task_s: dict[str, float]       # every task, slowest party

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _model_task(spec: ModelSpec, train_data: Any) -> tuple[Any, str, Optional[str]]:
    fate_cpn = _fate_client("pipeline.components.fate")
    he = {"kind": spec.kind, "key_length": spec.key_length}
    unifl_cpn = spec.kind == "unifl"
    if spec.algo == "lr":
        base, builtin = fate_cpn.CoordinatedLR, "coordinated_lr"
        kwargs = dict(epochs=spec.epochs, batch_size=None, early_stop="diff", tol=1e-4,
                      optimizer={"method": "sgd", "penalty": "l2", "alpha": 1.0,
                                 "optimizer_params": {"lr": 0.15, "weight_decay": 0}},
                      learning_rate_scheduler={"method": "constant", "scheduler_params":
                                               {"factor": 1.0, "total_iters": 10000}},
                      init_param={"method": "zeros", "fit_intercept": True})
    elif spec.algo == "sbt":
        base, builtin = fate_cpn.HeteroSecureBoost, "hetero_secureboost"
        kwargs = dict(num_trees=spec.trees, max_depth=spec.depth)
    else:
        raise ValueError(f"algo must be 'lr' or 'sbt', not {spec.algo!r}")
    component = f"unifl_{builtin}" if unifl_cpn else builtin
    # UniFL's twin: FATE's own pipeline class (same parameters and IO) under the entry point's name
    cls = type(f"Unifl{base.__name__}", (base,), {"component_ref": property(lambda self: component)})
    task = (cls if unifl_cpn else base)(spec.task_name, train_data=train_data, he_param=he, **kwargs)
    provider = PROVIDER if unifl_cpn else None
    if provider:
        task.conf.set("provider", provider)
    return task, component, provider


def _auc(frame: Any) -> float:
    from sklearn.metrics import roc_auc_score   # FATE's venv has scikit-learn (pyfate needs it)
    return float(roc_auc_score(frame["label"].astype(float), frame["predict_score"].astype(float)))


def run_job(server: FlowServer, dataset: str, models: Sequence[ModelSpec], psi: bool = True,
            namespace: str = "experiment", timeout: float = 900.0,
            task_cores: Optional[int] = None) -> JobResult:
    """Reader -> PSI -> each model of ``models`` on PSI's output, as one FATE-Flow job (the models run
    one after another on the same aligned data), through fate_client's pipeline.

    ``task_cores`` (standalone engine) is what each task reserves of the job's cores (FATE-Flow's
    default: 4 of 4, so one task at a time); 1 lets the independent model tasks run side by side.

    Kind ``unifl`` tasks use ``unifl_*`` components on UniFL's provider (checked registered first);
    kind ``paillier`` tasks are FATE's built-ins on FATE's provider.  Raises
    :class:`FateFlowJobFailed` with every failed task's error line, and :class:`FateFlowError` with the
    server's log tail when the job outlives ``timeout`` (fate_client only learns the job id when the
    job ends, so the job is left to :meth:`FlowServer.stop`, which ends the tasks it launched).
    """
    server.health()
    if any(m.kind == "unifl" for m in models):
        server.require_provider()
    _point_client(server)
    pipeline_mod = _fate_client("pipeline")
    fate_cpn = _fate_client("pipeline.components.fate")
    roles = {"guest": GUEST, "host": HOST}
    if any(m.algo == "lr" for m in models):
        roles["arbiter"] = ARBITER
    pipeline = pipeline_mod.FateFlowPipeline().set_parties(**roles)
    reader = fate_cpn.Reader("reader_0", runtime_parties=dict(guest=GUEST, host=HOST))
    reader.guest.task_parameters(namespace=namespace, name=f"{dataset}_guest")
    reader.hosts[0].task_parameters(namespace=namespace, name=f"{dataset}_host")
    tasks = [reader]
    data = reader.outputs["output_data"]
    if psi:
        psi_task = fate_cpn.PSI("psi_0", input_data=data)
        tasks.append(psi_task)
        data = psi_task.outputs["output_data"]
    meta = []
    for spec in models:
        task, component, provider = _model_task(spec, data)
        tasks.append(task)
        meta.append((spec, component, provider))
    if task_cores is not None:
        pipeline.conf.set("task", {"engine_run": {"cores": int(task_cores)}})
    pipeline.add_tasks(tasks)
    pipeline.compile()
    t0 = time.monotonic()
    _fit_with_timeout(server, pipeline, timeout)
    wall = time.monotonic() - t0
    jid = str(pipeline.model_info.job_id)
    task_s: dict[str, float] = {}
    per_party: dict[str, dict[str, float]] = {}
    for t in server.tasks(jid):
        sec = float(t.get("elapsed") or 0) / 1000.0
        per_party.setdefault(t["task_name"], {})[f"{t['role']}:{t['party_id']}"] = sec
        task_s[t["task_name"]] = max(task_s.get(t["task_name"], 0.0), sec)
    results = []
    for spec, component, provider in meta:
        out = pipeline.get_task_info(spec.task_name).get_output_data()["train_output_data"]
        parties = per_party.get(spec.task_name, {})
        results.append(ModelResult(spec.task_name, spec.algo, spec.kind, component, provider,
                                   _auc(out), parties.get(f"guest:{GUEST}", 0.0), parties))
    return JobResult(jid, dataset, wall, results, task_s)


def _fit_with_timeout(server: FlowServer, pipeline: Any, timeout: float) -> None:
    """pipeline.fit() in a thread, waited for at most ``timeout`` (fit() never returns on its own
    while a job hangs)."""
    import threading
    done = threading.Event()
    outcome: dict[str, BaseException] = {}

    def fit() -> None:
        try:
            pipeline.fit()
        except BaseException as exc:   # re-raised in the caller's thread below
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=fit, daemon=True)
    worker.start()
    if not done.wait(timeout):
        raise FateFlowError(f"FATE-Flow job still running after {timeout:.0f} s (its id is the last "
                            f"'Job id is' line above)\n" + _tail(server.error_log))
    exc = outcome.get("error")
    if exc is None:
        return
    m = re.search(r"job_id=(\d+)", str(exc))
    jid = m.group(1) if m else ""
    if not jid:   # refused before a job existed: fate_client's own message says why
        raise FateFlowError(f"FATE-Flow refused the job: {exc}") from exc
    raise FateFlowJobFailed(jid, server.task_errors(jid), str(exc).splitlines()[0]) from exc


# ---- command line ----------------------------------------------------------------------------------

def _server_from(args: argparse.Namespace) -> FlowServer:
    http_port = args.port or free_port()
    grpc_port = args.grpc_port or free_port()
    return FlowServer(Path(args.home), venv_python=args.python, http_port=http_port,
                      grpc_port=grpc_port)


def _ports_of(home: Path) -> tuple[int, int]:
    conf = yaml.safe_load((home / "conf" / "service_conf.yaml").read_text())["fateflow"]
    return int(conf["http_port"]), int(conf["grpc_port"])


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m unifl.fate.flow", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["init", "start", "stop", "status", "provider", "upload", "run"])
    p.add_argument("--home", required=True, help="FATE-Flow's home directory (absolute or relative)")
    p.add_argument("--python", default=sys.executable, help="the FATE venv's python (default: this one)")
    p.add_argument("--port", type=int, default=None,
                   help="HTTP port (init/start; default: the home's, 9380 at init; 0 = any free)")
    p.add_argument("--grpc-port", type=int, default=None, help="gRPC port (as --port; 9360 at init)")
    p.add_argument("--dataset", default="breast_hetero")
    p.add_argument("--data-dir", default=str(PACKAGED_DATA))
    p.add_argument("--algo", choices=["lr", "sbt"], default="lr")
    p.add_argument("--kinds", nargs="+", default=["paillier", "unifl"])
    p.add_argument("--key-length", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--trees", type=int, default=3)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--worker-env", nargs="*", default=[], metavar="KEY=VALUE",
                   help="start: environment for every task FATE-Flow launches, e.g. UNIFL_BACKEND=native")
    a = p.parse_args(argv)
    home = Path(a.home).resolve()
    conf_file = home / "conf" / "service_conf.yaml"
    if a.command == "init":
        server = FlowServer(home, a.python, http_port=a.port or 9380, grpc_port=a.grpc_port or 9360)
        server.init()
        server.write_ports()
        print(f"FATE-Flow home {home} (conf {conf_file}), venv {server.venv_python}")
        return 0
    if not conf_file.is_file():
        print(f"error: {home} is not a FATE-Flow home: run `python -m unifl.fate.flow init --home "
              f"{a.home}` first", file=sys.stderr)
        return 2
    http_port, grpc_port = _ports_of(home)
    if a.command == "start":
        http_port = free_port() if a.port == 0 else (a.port or http_port)
        grpc_port = free_port() if a.grpc_port == 0 else (a.grpc_port or grpc_port)
    server = FlowServer(home, a.python, http_port=http_port, grpc_port=grpc_port)
    try:
        if a.command == "start":
            env = dict(kv.split("=", 1) for kv in a.worker_env)
            sec = server.start(worker_env=env)
            print(f"FATE-Flow {FATE_VERSION} up at {server.url} after {sec:.1f} s "
                  f"(pid {server.running_pid()}, logs {home}/logs)")
        elif a.command == "stop":
            print("stopped" if server.stop() else "not running")
        elif a.command == "status":
            print(json.dumps(server.health(), indent=1))
        elif a.command == "provider":
            print(json.dumps(server.register_provider(), indent=1))
            print(f"registered {PROVIDER}")
        elif a.command == "upload":
            for role, sec in upload(server, a.dataset, Path(a.data_dir)).items():
                print(f"{a.dataset}_{role}: uploaded in {sec:.1f} s")
        elif a.command == "run":
            specs = [ModelSpec(a.algo, kind, a.key_length, a.epochs, a.trees, a.depth)
                     for kind in a.kinds]
            result = run_job(server, a.dataset, specs)
            print(json.dumps(result.to_json(), indent=1))
    except FateFlowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
