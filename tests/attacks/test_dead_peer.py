"""A peer killed with SIGKILL (or cut off by a partition) in every phase and every kind of wait:
the surviving party raises PeerUnavailable within liveness_s of the peer's last answer, not after
its timeout_s, whether it was receiving, sending or computing when the peer died.

Transport level: a peer process killed while this party sends, while it computes (its next wait
then ends at once), a partition during a send.  Job level: the host (or the guest) of a real
``psi+vlr`` job is a process of its own, running the shipped ``unifl run`` path, and kills itself
with SIGKILL at a chosen message (the test's only addition is that hook); the other party runs the
shipped ``run_party`` in this process.  timeout_s is 60 s everywhere, liveness_s 2 s: the old
behaviour (a send retrying until timeout_s, pings only inside a recv) fails every bound below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from unifl.app.params import load_job
from unifl.app.transport import GrpcTransport
from unifl.configs import PartyConfig, validate
from unifl.core.errors import PeerUnavailable
from unifl.demo import free_port
from unifl.party import run_party

from tests.helpers.proxy import PausableProxy
from tests.helpers.paths import ROOT as REPO_ROOT

LIVENESS = 2.0
TIMEOUT = 60.0
#: what a loaded 2-core CI machine adds to the bound (scheduling, a process's exit)
SLACK = 1.5
ROOT = REPO_ROOT

PEER = textwrap.dedent("""
    import sys, time
    from unifl.app.transport import GrpcTransport
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": sys.argv[1]}, "job1", timeout_s=60,
                      liveness_s=%r)
    print(h.address, flush=True)
    h.send("guest", "ready", b"x")
    h.recv("guest", "go", timeout=60)
    print("killed at", time.time(), flush=True)
    time.sleep(600)        # killed here by the test
""" % LIVENESS)


def _peer(tmp_path):
    g = GrpcTransport("guest", "127.0.0.1:0", {}, "job1", timeout_s=TIMEOUT, liveness_s=LIVENESS)
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    proc = subprocess.Popen([sys.executable, str(script), g.address], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    g.add_peer("host", proc.stdout.readline().strip())
    assert g.recv("host", "ready", timeout=30) == b"x"
    g.send("host", "go", b"")
    proc.stdout.readline()
    return g, proc


def _kill(proc):
    proc.kill()
    proc.wait(10)
    return time.monotonic()


# ------------------------------------------------------------------ transport level
def test_a_peer_killed_while_we_send_ends_the_send_within_liveness(tmp_path):
    """The failure of the field report: the guest's send to a killed host retried until its
    timeout_s (120.9 s) instead of ending at liveness_s."""
    g, proc = _peer(tmp_path)
    try:
        killed = _kill(proc)
        with pytest.raises(PeerUnavailable, match="sending \\[next\\] to host.*answered nothing"):
            g.send("host", "next", b"y" * 1000)
        assert time.monotonic() - killed < LIVENESS + SLACK
    finally:
        proc.kill()
        g.close()


def test_a_peer_killed_while_we_compute_ends_our_next_wait_at_once(tmp_path):
    g, proc = _peer(tmp_path)
    try:
        _kill(proc)
        time.sleep(LIVENESS + 1.0)           # computing: no wait in progress
        for wait in (lambda: g.recv("host", "result"), lambda: g.send("host", "more", b"z")):
            t0 = time.monotonic()
            with pytest.raises(PeerUnavailable, match="answered nothing"):
                wait()
            assert time.monotonic() - t0 < 0.5 + SLACK / 3
    finally:
        proc.kill()
        g.close()


def test_a_partition_during_a_send_ends_it_within_liveness():
    g = GrpcTransport("guest", "127.0.0.1:0", {}, "job1", timeout_s=TIMEOUT, liveness_s=LIVENESS)
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": g.address}, "job1", timeout_s=TIMEOUT)
    proxy = PausableProxy(h.address)
    g.add_peer("host", proxy.address)
    try:
        g.send("host", "hello", b"x")
        assert h.recv("guest", "hello") == b"x"
        proxy.partition()
        t0 = time.monotonic()
        with pytest.raises(PeerUnavailable, match="sending \\[big\\] to host.*partitioned"):
            g.send("host", "big", b"b" * (4 << 20))
        assert time.monotonic() - t0 < LIVENESS + SLACK
    finally:
        proxy.close()
        g.close()
        h.close()


# ------------------------------------------------------------------ job level: every phase
KILLING_PARTY = textwrap.dedent("""
    # one party of a job, through the shipped `unifl run`, that kills itself with SIGKILL at a
    # message: argv = when (before|after) method (send|recv) tag-prefix stamp-file, then run's args
    import os, signal, sys, time
    from unifl.app.channel import Channel
    when, method, prefix, stamp = sys.argv[1:5]
    real = getattr(Channel, method)

    def die():
        with open(stamp, "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    def hooked(self, peer, tag, *a, **k):
        if tag.startswith(prefix) and when == "before":
            die()
        out = real(self, peer, tag, *a, **k)
        if tag.startswith(prefix):
            die()
        return out

    setattr(Channel, method, hooked)
    from unifl.cli import app
    sys.argv = ["unifl", "run", *sys.argv[5:]]
    app()
""")

JOB = """job_id: dead-peer
algorithm: psi+vlr
dataset: breast
parties: [guest, host]
seed: 42
key_bits: 1024
params: {epochs: 1, batch_size: 64, learning_rate: 0.15, drop_fraction: 0.05,
         features: {guest: 10, host: 20}}
"""


def _party_yaml(role, ports):
    peer = "host" if role == "guest" else "guest"
    return {"party": role, "backend": "native", "fallback": ["cpu"], "key_bits": 1024,
            "network": {"listen": f"127.0.0.1:{ports[role]}",
                        "peers": {peer: f"127.0.0.1:{ports[peer]}"},
                        "timeout_s": TIMEOUT, "liveness_s": LIVENESS}}


def _run_with_a_dying_peer(tmp_path, survivor, when, method, prefix):
    """The survivor's run_party in this process against the other party's process, which
    SIGKILLs itself at ``prefix``; returns (seconds from the kill to PeerUnavailable, error)."""
    dying = "host" if survivor == "guest" else "guest"
    ports = {r: free_port() for r in ("guest", "host")}
    (tmp_path / "job.yaml").write_text(JOB)
    (tmp_path / f"{dying}.yaml").write_text(json.dumps(_party_yaml(dying, ports)))
    script = tmp_path / "dying.py"
    script.write_text(KILLING_PARTY)
    stamp = tmp_path / "killed_at"
    proc = subprocess.Popen(
        [sys.executable, str(script), when, method, prefix, str(stamp), "--config",
         str(tmp_path / f"{dying}.yaml"), "--job", str(tmp_path / "job.yaml"), "--no-progress",
         "--no-table"], env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cfg = validate(PartyConfig, _party_yaml(survivor, ports), survivor)
    try:
        with pytest.raises(PeerUnavailable) as err:
            run_party(cfg, load_job(tmp_path / "job.yaml"), progress=False)
        failed_at = time.time()
        assert proc.wait(30) == -9, proc.stderr.read()[-2000:]
        return failed_at - float(stamp.read_text()), err.value
    finally:
        proc.kill()


PHASES = [
    # (survivor, kill before/after, method, tag prefix): what the survivor is doing then
    pytest.param("guest", "after", "send", "psi/pk", id="psi-guest-computing-then-sends"),
    pytest.param("guest", "before", "send", "psi/signed", id="psi-guest-receiving",
                 marks=pytest.mark.slow),
    pytest.param("guest", "before", "send", "vfl/pk", id="key-exchange-guest-receiving",
                 marks=pytest.mark.slow),
    pytest.param("guest", "after", "send", "vfl/e0/b0/zh",
                 id="training-guest-computing-then-sends"),
    pytest.param("guest", "before", "send", "vfl/zh_test", id="evaluation-guest-receiving",
                 marks=pytest.mark.slow),
    pytest.param("host", "after", "send", "psi/blinded", id="psi-host-signing",
                 marks=pytest.mark.slow),
    pytest.param("host", "before", "send", "vfl/e0/b1/u", id="training-host-receiving",
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("survivor,when,method,prefix", PHASES)
def test_a_peer_killed_in_any_phase_is_unavailable_within_liveness(tmp_path, survivor, when,
                                                                   method, prefix):
    seconds, err = _run_with_a_dying_peer(tmp_path, survivor, when, method, prefix)
    assert "answered nothing" in str(err)
    assert 0 <= seconds < LIVENESS + SLACK, (seconds, str(err))
