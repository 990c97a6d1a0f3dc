"""GrpcTransport over loopback: order, no duplicates from retries, named refusals, timeouts, a
killed peer, size limits, mutual TLS.  Every wait is bounded by a small timeout."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import grpc
import numpy as np
import pytest

from unifl.app.channel import Channel, Transport
from unifl.app.transport import GrpcTransport, TlsFiles
from unifl.app.transport.envelope import (DELIVER_METHOD, PROTOCOL_VERSION, SCHEMA, Ack, Envelope,
                                          ErrorCode)
from unifl.core.errors import (JobMismatchError, MalformedMessageError, MessageTooLarge, PeerClosed,
                          PeerTimeout, PeerUnavailable, ProtocolVersionError, SequenceError,
                          TransportError)
from tests.helpers.paths import ROOT as REPO_ROOT

T = 3.0  # seconds: every receive in these tests gives up after this


def pair(job="job1", **kw):
    g = GrpcTransport("guest", "127.0.0.1:0", {}, job, timeout_s=T, **kw)
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": g.address}, job, timeout_s=T, **kw)
    g.add_peer("host", h.address)
    return g, h


@pytest.fixture
def gh():
    g, h = pair()
    yield g, h
    g.close()
    h.close()


def raw_deliver(address: str, **fields) -> Ack:
    env = dict(protocol_version=PROTOCOL_VERSION, job_id="job1", sender="guest", receiver="host",
               tag="t", session=7, seq=1, payload=b"p")
    env.update(fields)
    env.setdefault("crc32", zlib.crc32(env["payload"]))
    with grpc.insecure_channel(address) as ch:
        call = ch.unary_unary(DELIVER_METHOD)
        if "peer_session" not in env:        # the session handshake: echo the receiver's nonce
            hello = Envelope(protocol_version=PROTOCOL_VERSION, job_id=env["job_id"],
                             sender=env["sender"], receiver="host", tag="__hello__",
                             session=env["session"], seq=0)
            env["peer_session"] = Ack.FromString(call(hello.SerializeToString(), timeout=T)).session
        raw = call(Envelope(**env).SerializeToString(), timeout=T)
    return Ack.FromString(raw)


def test_proto_file_matches_runtime_schema():
    text = (REPO_ROOT / "unifl/app/transport/unifl_transport.proto").read_text()
    for msg, fields in SCHEMA.items():
        body = re.search(rf"message {msg} \{{(.*?)\}}", text, re.S).group(1)
        declared = [(n, int(k)) for _, n, k in re.findall(r"^\s*(\w+)\s+(\w+)\s*=\s*(\d+);", body, re.M)]
        assert declared == [(n, k) for n, k, _ in fields]


def test_roundtrip_order_tags_stats_and_channel(gh):
    g, h = gh
    assert isinstance(g, Transport)
    for i in range(20):
        g.send("host", f"t{i % 3}", bytes([i]) * (i + 1))
    for tag in ("t2", "t0", "t1"):                       # tags are independent FIFOs
        got = [h.recv("guest", tag) for _ in range(len(range(int(tag[1]), 20, 3)))]
        assert got == [bytes([i]) * (i + 1) for i in range(int(tag[1]), 20, 3)]
    assert g.stats["messages_sent"] == h.stats["messages_received"] == 20
    assert g.stats["bytes_sent"] == h.stats["bytes_received"] == sum(range(1, 21))
    cg, ch = Channel(g), Channel(h)
    out = {}
    th = threading.Thread(target=lambda: out.update(x=ch.recv("guest", "obj")))
    th.start()                                           # both directions at once
    cg.send("host", "obj", {"w": np.arange(4.0), "ids": ["a", "b"], "n": 2**300})
    ch.send("guest", "back", [1, 2])
    th.join(T)
    assert cg.recv("host", "back") == [1, 2]
    assert out["x"]["n"] == 2**300 and np.array_equal(out["x"]["w"], np.arange(4.0))


def test_a_live_but_silent_peer_is_a_timeout_not_a_lost_peer():
    g = GrpcTransport("guest", "127.0.0.1:0", {}, "job1", timeout_s=T, liveness_s=0.5)
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": g.address}, "job1", timeout_s=T)
    g.add_peer("host", h.address)
    try:
        h.send("guest", "hello", b"x")
        assert g.recv("host", "hello") == b"x"
        with pytest.raises(PeerTimeout):                 # pinged several times, always answered
            g.recv("host", "busy", timeout=1.5)
    finally:
        g.close()
        h.close()


def test_retry_of_the_same_message_is_not_duplicated(gh):
    g, h = gh
    first = raw_deliver(h.address, payload=b"once")
    again = raw_deliver(h.address, payload=b"once")      # a resend after a lost Ack
    assert first.error_code == 0 and not first.duplicate and again.duplicate
    assert h.recv("guest", "t") == b"once"
    with pytest.raises(PeerTimeout):
        h.recv("guest", "t", timeout=0.3)
    assert h.stats["duplicates_dropped"] == 1
    # another session from the same sender (a restarted party) is refused unless the job resumes
    assert raw_deliver(h.address, session=8, payload=b"new").error_code == ErrorCode.SESSION


def test_gap_in_sequence_is_a_named_error_at_both_ends(gh):
    g, h = gh
    g.send("host", "a", b"1")
    g._next_seq["host"] += 1                             # as if one message was lost
    with pytest.raises(SequenceError, match="expected seq 2"):
        g.send("host", "a", b"3")
    assert h.recv("guest", "a") == b"1"                  # what arrived in order is kept
    with pytest.raises(SequenceError, match="out of order"):
        h.recv("guest", "a")


def test_other_protocol_version_is_refused_by_name():
    g, h = pair()
    old = GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "job1", timeout_s=T,
                        protocol_version=PROTOCOL_VERSION + 1)
    try:
        with pytest.raises(ProtocolVersionError, match=f"v{PROTOCOL_VERSION + 1}.*v{PROTOCOL_VERSION}"):
            old.send("host", "hello", b"x")
        t0 = time.monotonic()
        with pytest.raises(ProtocolVersionError):
            h.recv("guest", "hello", timeout=T)
        assert time.monotonic() - t0 < 1.0               # at once, not after the timeout
    finally:
        for t in (old, g, h):
            t.close()


def test_other_job_is_refused_by_name(gh):
    g, h = gh
    foreign = GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "job2", timeout_s=T)
    try:
        with pytest.raises(JobMismatchError, match="job2.*job1"):
            foreign.send("host", "t", b"x")
        with pytest.raises(JobMismatchError):
            h.recv("guest", "t")
    finally:
        foreign.close()


def test_malformed_envelopes(gh):
    g, h = gh
    with grpc.insecure_channel(h.address) as ch:
        ack = Ack.FromString(ch.unary_unary(DELIVER_METHOD)(b"\xff\xff\xff garbage", timeout=T))
    assert ack.error_code == ErrorCode.MALFORMED
    assert raw_deliver(h.address, crc32=12345).error_code == ErrorCode.MALFORMED
    with pytest.raises(MalformedMessageError, match="checksum"):
        h.recv("guest", "t")
    assert raw_deliver(h.address, receiver="arbiter").error_code == ErrorCode.RECEIVER
    assert raw_deliver(h.address, sender="arbiter").error_code == ErrorCode.UNKNOWN_SENDER


def test_message_size_limits():
    g, h = pair(max_message_mb=0.01)
    big = GrpcTransport("arbiter", "127.0.0.1:0", {"host": h.address}, "job1", timeout_s=T)
    h.add_peer("arbiter", big.address)
    try:
        with pytest.raises(MessageTooLarge, match="exceed the limit"):
            g.send("host", "t", b"x" * 20_000)          # refused before sending
        with pytest.raises(MessageTooLarge):
            big.send("host", "t", b"x" * 200_000)       # refused by the receiver's limit
        g.send("host", "t", b"x" * 10_000)
        assert len(h.recv("guest", "t")) == 10_000
    finally:
        for t in (big, g, h):
            t.close()


def test_unreachable_peer_and_closed_peer():
    g = GrpcTransport("guest", "127.0.0.1:0", {"host": "127.0.0.1:9"}, "job1", timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(PeerUnavailable, match="host.*127.0.0.1:9.*not delivered within 1"):
        g.send("host", "t", b"x")
    assert time.monotonic() - t0 < 3.0
    g.close()
    g, h = pair()
    g.send("host", "last", b"bye")
    g.close()
    assert h.recv("guest", "last") == b"bye"            # queued messages are still delivered
    with pytest.raises(PeerClosed, match="guest closed"):
        h.recv("guest", "more")
    h.close()
    with pytest.raises(TransportError):
        h.send("guest", "t", b"x")


def test_a_failed_send_never_lets_the_next_message_pass_as_a_duplicate(tmp_path):
    from unifl.demo import free_port
    port = free_port()
    g = GrpcTransport("guest", "127.0.0.1:0", {"host": f"127.0.0.1:{port}"}, "job1", timeout_s=T)
    with pytest.raises(PeerUnavailable):
        g.send("host", "t", b"lost", timeout=0.5)      # nobody listens yet: not delivered
    h = GrpcTransport("host", f"127.0.0.1:{port}", {"guest": g.address}, "job1", timeout_s=T)
    try:
        with pytest.raises(SequenceError, match="expected seq 1"):
            g.send("host", "t", b"next")                # the gap is reported, not hidden
        with pytest.raises(SequenceError):
            h.recv("guest", "t")
    finally:
        g.close()
        h.close()


KILLED_PEER = textwrap.dedent("""
    import sys, time
    from unifl.app.transport import GrpcTransport
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": sys.argv[1]}, "job1", timeout_s=5)
    print(h.address, flush=True)
    h.send("guest", "epoch0", b"step 1")
    time.sleep(60)        # 'mid-epoch': killed here by the test
""")


@pytest.mark.parametrize("timeout,liveness,error", [(2.0, 5.0, PeerTimeout), (30.0, 1.0, PeerUnavailable)],
                         ids=["receive-timeout", "liveness-pings"])
def test_killed_party_gives_a_clear_error_within_the_timeout(tmp_path, timeout, liveness, error):
    g = GrpcTransport("guest", "127.0.0.1:0", {}, "job1", timeout_s=timeout, liveness_s=liveness)
    script = tmp_path / "peer.py"
    script.write_text(KILLED_PEER)
    proc = subprocess.Popen([sys.executable, str(script), g.address], stdout=subprocess.PIPE,
                            text=True)
    try:
        g.add_peer("host", proc.stdout.readline().strip())
        assert g.recv("host", "epoch0", timeout=20) == b"step 1"
        proc.kill()
        proc.wait(5)
        t0 = time.monotonic()
        with pytest.raises(error, match=r"\[epoch0\] from host"):
            g.recv("host", "epoch0")
        assert time.monotonic() - t0 < min(timeout, 2 * liveness) + 2.0
    finally:
        proc.kill()
        g.close()


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_pki(d: Path, ca: str, roles):
    """A throwaway CA and one certificate per role (SAN DNS:<role>), EC P-256 for speed."""
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "1", "-subj", f"/CN={ca}", cwd=d)
    files = {}
    for role in roles:
        ext = d / f"{role}.ext"
        ext.write_text(f"subjectAltName=DNS:{role}\nbasicConstraints=CA:FALSE\n"
                       "extendedKeyUsage=serverAuth,clientAuth\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{role}.key", "-out", f"{role}.csr", "-subj", f"/CN={role}", cwd=d)
        _openssl("x509", "-req", "-in", f"{role}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                 "-CAcreateserial", "-out", f"{role}.pem", "-days", "1", "-extfile", ext.name, cwd=d)
        files[role] = TlsFiles(str(d / f"{role}.pem"), str(d / f"{role}.key"), str(d / f"{ca}.pem"))
    return files


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI needed to make test certs")
def test_mutual_tls(tmp_path):
    good = _make_pki(tmp_path, "ca", ["guest", "host"])
    (tmp_path / "rogue").mkdir()
    rogue = _make_pki(tmp_path / "rogue", "rogueca", ["guest"])
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": "127.0.0.1:1"}, "j", tls=good["host"], timeout_s=T)
    g = GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "j", tls=good["guest"], timeout_s=T)
    h.add_peer("guest", g.address)
    try:
        g.send("host", "t", b"secret")
        assert h.recv("guest", "t") == b"secret"
        h.send("guest", "r", b"ok")
        assert g.recv("host", "r") == b"ok"
        # a client whose certificate another CA signed cannot even connect
        bad = GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "j", tls=rogue["guest"],
                            timeout_s=1.0)
        with pytest.raises(PeerUnavailable):
            bad.send("host", "t", b"x")
        bad.close()
        # a valid certificate of one role cannot claim to be another (the host's cert as 'arbiter')
        h.add_peer("arbiter", "127.0.0.1:1")
        spoof = GrpcTransport("arbiter", "127.0.0.1:0", {"host": h.address}, "j", tls=good["guest"],
                              timeout_s=T)
        with pytest.raises(TransportError, match="does not name 'arbiter'"):
            spoof.send("host", "t", b"x")
        spoof.close()
        # plaintext to a TLS server fails clearly
        plain = GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "j", timeout_s=1.0)
        with pytest.raises(PeerUnavailable):
            plain.send("host", "t", b"x")
        plain.close()
    finally:
        g.close()
        h.close()
