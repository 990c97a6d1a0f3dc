"""The FATE-Flow tool (unifl.fate.flow) against another local user: the folders it creates are
private (0700, owned by this user, never a link) and it refuses any other; ``stop`` kills only a
process that is provably the server it started (pid file written O_EXCL in the private home,
the process's start time, and a random token in its environment), never what a stale or planted
pid file names.  Runs in UniFL's own venv: nothing here needs FATE-Flow itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unifl.fate import flow

NOBODY = 65534
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:                          # a zombie of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ------------------------------------------------------------------ private folders
def test_the_provider_folder_is_inside_the_private_home(tmp_path):
    """FATE-Flow puts the provider folder first on every task's path: a sitecustomize.py there
    runs as the job's user.  It was home.parent/provider, a folder anyone who can write the home's
    parent could create first."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o1777)                       # like /tmp
    planted = shared / "provider"                  # where the old code looked
    planted.mkdir()
    (planted / "sitecustomize.py").write_text("open('/tmp/owned', 'w')\n")
    server = flow.FlowServer(shared / "home")
    assert server.provider_folder.parent == server.home
    server.make_home()
    folder = flow.write_provider_folder(server.provider_folder)
    assert folder != planted.resolve() and not (folder / "sitecustomize.py").exists()
    for path in (server.home, folder):
        st = os.lstat(path)
        assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700


@pytest.mark.parametrize("how", ["another user's", "group-writable", "a link", "a file"])
def test_a_folder_prepared_by_someone_else_is_refused(tmp_path, how):
    target = tmp_path / "provider"
    if how == "a link":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        target.symlink_to(elsewhere, target_is_directory=True)
    elif how == "a file":
        target.write_text("x")
    else:
        target.mkdir(mode=0o700)
        (target / "sitecustomize.py").write_text("raise SystemExit('owned')\n")
        if how == "another user's":
            if os.geteuid() != 0:
                pytest.skip("making a folder of another user needs root")
            os.chown(target, NOBODY, NOBODY)
        else:
            os.chmod(target, 0o770)
    with pytest.raises(flow.FateFlowError, match="provider"):
        flow.write_provider_folder(target)
    server = flow.FlowServer(target)               # the same rule for a home
    with pytest.raises(flow.FateFlowError):
        server.make_home()


# ------------------------------------------------------------------ stop kills only our server
def _victim() -> subprocess.Popen:
    """An unrelated process in a session of its own (as FATE-Flow's server would be)."""
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


@needs_proc
@pytest.mark.parametrize("pid_file", ["bare pid (the old format)", "planted record"])
def test_stop_never_kills_what_a_stale_or_planted_pid_file_names(tmp_path, pid_file):
    server = flow.FlowServer(tmp_path / "home")
    server.make_home()
    victim = _victim()
    try:
        if pid_file.startswith("bare"):
            server.pid_file.write_text(str(victim.pid))
        else:                                      # right pid and start time, no token of ours
            server.pid_file.write_text(json.dumps({
                "pid": victim.pid, "start_time": flow.process_start_time(victim.pid),
                "token": "0" * 32}))
        assert server.running_pid() is None
        assert server.stop() is False
        time.sleep(0.3)
        assert _alive(victim.pid)
    finally:
        victim.kill()
        victim.wait()


@needs_proc
def test_stop_kills_the_server_it_started_and_its_tasks(tmp_path):
    server = flow.FlowServer(tmp_path / "home")
    server.make_home()
    # a "server" that launches a "task" (it inherits the environment, as FATE-Flow's tasks do)
    # and a process that scrubbed its environment: not provably ours, so left alone
    code = ("import subprocess, sys, time; "
            "t = subprocess.Popen(['sleep', '300']); "
            "o = subprocess.Popen(['sleep', '301'], env={}); "
            "print(t.pid, o.pid, flush=True); time.sleep(300)")
    proc = server.launch([sys.executable, "-c", code], dict(os.environ), tmp_path / "out.log")
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "out.log").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.1)
        task, other = map(int, (tmp_path / "out.log").read_text().split())
        assert server.running_pid() == proc.pid
        with pytest.raises(FileExistsError):      # the record is made once, O_EXCL
            server._write_pid_record(proc.pid, "1" * 32)
        assert server.stop() is True
        time.sleep(0.3)
        assert not _alive(proc.pid) and not _alive(task)
        assert _alive(other)
        assert not server.pid_file.exists()
    finally:
        for pid in (proc.pid,):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
