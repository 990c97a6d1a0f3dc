"""The hostile peer against the transport and the configuration: plaintext off the loopback, a
spoofed sender poisoning another party's stream, a flood, a replayed recording, a second session,
a network partition.  Everything runs on 127.0.0.1; no test opens a connection anywhere else."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
import zlib
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from typer.testing import CliRunner

from unifl.app.transport import GrpcTransport
from unifl.app.transport.envelope import (DELIVER_METHOD, PROTOCOL_VERSION, SERVICE, Ack, Envelope,
                                          ErrorCode)
from unifl.app.transport.grpc_transport import HELLO_TAG
from unifl.app.transport.pki import make_demo_pki
from unifl.cli import app
from unifl.configs import load_party
from unifl.configs.schema import is_loopback_address
from unifl.core.errors import (ConfigError, PeerQuotaExceeded, PeerTimeout, PeerUnavailable,
                          SessionError)
from unifl.party import warn_if_insecure

T = 3.0  # seconds: every receive in these tests gives up after this


def _write(tmp_path: Path, text: str, name: str = "party.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- no plaintext off the loopback ----------------------------------------------------
@pytest.mark.parametrize("text,field", [
    ("party: guest\nnetwork: {peers: {host: '10.0.0.5:50052'}}\n", "network.peers.host"),
    ("party: host\nnetwork: {listen: '0.0.0.0:50053'}\n", "network.listen"),
    ("party: host\nnetwork: {listen: '[::]:50053'}\n", "network.listen"),
    ("party: guest\nnetwork: {peers: {host: 'host.example.org:50053'}}\n", "network.peers.host"),
    ("party: guest\nnetwork: {peers: {arbiter: '127.0.0.1:1', host: 'localhost.evil:2'}}\n",
     "network.peers.host"),
    ("party: guest\nnetwork: {listen: '192.168.1.7:50052', tls: null}\n", "network.listen"),
], ids=["ip-peer", "wildcard-v4", "wildcard-v6", "hostname-peer", "lookalike-host", "lan-listen"])
def test_plaintext_off_the_loopback_is_refused_naming_the_field(tmp_path, text, field):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_party(p)
    msg = str(err.value)
    assert str(p) in msg and field in msg and "network.tls" in msg and "insecure" in msg, msg
    assert "network.peers.arbiter" not in msg     # only the offending addresses are named


def test_loopback_without_tls_is_fine():
    for addr in ("127.0.0.1:1", "127.8.9.10:2", "[::1]:3", "localhost:4", "LOCALHOST:5"):
        assert is_loopback_address(addr), addr
    for addr in ("0.0.0.0:1", "[::]:1", "10.0.0.5:1", "my-laptop:1", "127.0.0.1.nip.io:1"):
        assert not is_loopback_address(addr), addr


def test_insecure_true_loads_and_warns_on_every_start(tmp_path, capsys, caplog):
    p = _write(tmp_path, "party: guest\nnetwork: {listen: '0.0.0.0:50052', "
                         "peers: {host: '10.0.0.5:50053'}, insecure: true}\n")
    cfg = load_party(p)
    for _ in range(2):                       # each start says it again
        assert warn_if_insecure(cfg)
    err = capsys.readouterr().err
    assert err.count("UNAUTHENTICATED") == 2 and "UNENCRYPTED" in err and "10.0.0.5" in err
    assert any("UNAUTHENTICATED" in r.getMessage() for r in caplog.records)
    # with TLS (or nothing to warn about) there is no warning
    assert not warn_if_insecure(load_party(_write(tmp_path, "party: guest\n", "plain.yaml")))


def test_command_line_overrides_obey_the_same_rule(tmp_path):
    # (0.0.0.0 as a peer is off the loopback by the rule, yet dialling it stays on this machine,
    # so even code without the rule would connect nowhere else)
    runner = CliRunner()
    for args, field in ((["--peer", "host=0.0.0.0:9"], "network.peers.host"),
                        (["--listen", "0.0.0.0:0"], "network.listen")):
        res = runner.invoke(app, ["run", "--config", "guest_native.yaml", "--job",
                                  "demo_psi_breast.yaml", "--key-bits", "1024", "--timeout", "1",
                                  "--no-progress", "--no-table", *args])
        assert res.exit_code == 2, res.output        # ConfigError, before any connection
        assert field in res.output.replace("\n", ""), res.output


def test_a_real_start_with_insecure_true_warns(tmp_path):
    # a guest whose (loopback) host never comes: it starts, warns, and fails within its timeout
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    p = _write(tmp_path, f"party: guest\nbackend: cpu\nfallback: [cpu]\nkey_bits: 1024\n"
                         f"network: {{listen: '127.0.0.1:0', peers: {{host: '127.0.0.1:{port}'}}, "
                         "insecure: true, timeout_s: 1, liveness_s: 0.5}\n")
    res = CliRunner().invoke(app, ["run", "--config", str(p), "--job", "demo_psi_breast.yaml",
                                   "--key-bits", "1024", "--no-progress", "--no-table"])
    assert res.exit_code == 3, res.output            # a TransportError: nobody answered
    assert "UNAUTHENTICATED" in res.output and "UNENCRYPTED" in res.output


def test_transport_refuses_plaintext_off_the_loopback_too():
    with pytest.raises(ConfigError, match="10.0.0.5.*off the loopback"):
        GrpcTransport("guest", "127.0.0.1:0", {"host": "10.0.0.5:50053"}, "j", timeout_s=T)
    g = GrpcTransport("guest", "127.0.0.1:0", {}, "j", timeout_s=T)
    try:
        assert g.mutually_authenticated is False
        with pytest.raises(ConfigError, match="peer host"):
            g.add_peer("host", "example.org:443")
        assert "host" not in g.peers
    finally:
        g.close()


# ---- authenticate before recording anything about the claimed sender -------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    good = make_demo_pki(d / "good", ("guest", "host", "arbiter"))
    rogue = make_demo_pki(d / "rogue", ("guest",))
    return good, rogue


def test_demo_pki_keys_are_private_and_certs_name_the_role(pki):
    from cryptography import x509
    good, _ = pki
    for role, files in good.items():
        assert stat.S_IMODE(os.stat(files.key).st_mode) == 0o600
        cert = x509.load_pem_x509_certificate(Path(files.cert).read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == [role]
    assert not list(Path(good["guest"].ca).parent.glob("ca*.key"))   # the CA key is not kept


def _secure_call(address: str, files, target: str = "host"):
    cert, key, ca = files.read()
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                         certificate_chain=cert)
    ch = grpc.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", target)])
    return ch, ch.unary_unary(DELIVER_METHOD)


def _env(**fields) -> bytes:
    env = dict(protocol_version=PROTOCOL_VERSION, job_id="j", sender="guest", receiver="host",
               tag="t", session=7, seq=1, payload=b"evil")
    env.update(fields)
    env.setdefault("crc32", zlib.crc32(env["payload"]))
    return Envelope(**env).SerializeToString()


def test_a_spoofed_sender_cannot_poison_the_guest_host_stream(pki):
    good, rogue = pki
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": "127.0.0.1:1", "arbiter": "127.0.0.1:1"},
                      "j", tls=good["host"], timeout_s=T)
    g = GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "j", tls=good["guest"],
                      timeout_s=T)
    h.add_peer("guest", g.address)
    try:
        assert h.mutually_authenticated and g.mutually_authenticated
        nonce = None
        # a party with a valid certificate for another role claims to be the guest, with every
        # kind of envelope that would break the guest's stream if it were believed
        for cert_role in ("arbiter", "host"):
            ch, call = _secure_call(h.address, good[cert_role])
            with ch:
                hello = Ack.FromString(call(_env(tag=HELLO_TAG, seq=0, payload=b""), timeout=T))
                assert hello.error_code == ErrorCode.IDENTITY and not hello.session
                for bad in (dict(protocol_version=PROTOCOL_VERSION + 7), dict(job_id="other"),
                            dict(receiver="arbiter"), dict(crc32=1), dict(seq=5),
                            dict(peer_session=nonce or 1), dict(tag="__bye__", payload=b"")):
                    ack = Ack.FromString(call(_env(**bad), timeout=T))
                    assert ack.error_code == ErrorCode.IDENTITY, (cert_role, bad, ack)
        # a certificate from another CA, and no certificate at all, do not even get a hearing
        for client in (GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "j",
                                     tls=rogue["guest"], timeout_s=1.0),
                       GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "j",
                                     timeout_s=1.0)):
            with pytest.raises(PeerUnavailable):
                client.send("host", "t", b"x")
            client.close()
        # the real guest's stream is untouched: nothing pending, no recorded refusal, and it works
        with pytest.raises(PeerTimeout):
            h.recv("guest", "t", timeout=0.3)
        assert "guest" not in h._errors and not h._bound and not h._queued
        g.send("host", "t", b"honest")
        assert h.recv("guest", "t") == b"honest"
        h.send("guest", "r", b"ok")
        assert g.recv("host", "r") == b"ok"
        assert h.stats["refused"] >= 14
    finally:
        g.close()
        h.close()


# ---- bounded queues per peer -------------------------------------------------------
def _pair(**kw):
    g = GrpcTransport("guest", "127.0.0.1:0", {}, "job1", timeout_s=T)
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": g.address}, "job1", timeout_s=T, **kw)
    g.add_peer("host", h.address)
    return g, h


def test_a_message_flood_hits_the_quota_not_memory():
    g, h = _pair(max_queued_messages=5)
    try:
        accepted = 0
        with pytest.raises(PeerQuotaExceeded, match="max_queued_messages"):
            for i in range(200):                  # the flood: nobody on the host reads
                g.send("host", "spam", b"x" * 100)
                accepted += 1
        assert accepted == 5 and h._queued["guest"] == [500, 5]
        assert h.stats["messages_received"] == 5
        with pytest.raises(PeerQuotaExceeded):    # the host learns it at once, not at a timeout
            h.recv("guest", "model", timeout=T)
    finally:
        g.close()
        h.close()


def test_a_byte_flood_hits_the_quota_and_reading_frees_it():
    g, h = _pair(max_message_mb=0.01, max_queued_mb=0.02)     # 20 KiB queued at most
    try:
        g.send("host", "a", b"1" * 8000)
        g.send("host", "a", b"2" * 8000)
        assert h.recv("guest", "a") == b"1" * 8000            # reading frees the room again
        g.send("host", "a", b"3" * 8000)
        with pytest.raises(PeerQuotaExceeded, match="bytes"):
            g.send("host", "a", b"4" * 8000)                  # 24000 > 20971 bytes queued
        assert h._queued["guest"][0] == 16000 <= h.max_queued_bytes
    finally:
        g.close()
        h.close()


def test_quota_config_is_validated(tmp_path):
    p = _write(tmp_path, "party: guest\nnetwork: {max_message_mb: 64, max_queued_mb: 8}\n")
    with pytest.raises(ConfigError, match="max_queued_mb"):
        load_party(p)


# ---- sessions -------------------------------------------------------------------
class Recorder:
    """A man in the middle on the loopback that keeps the raw bytes of every envelope."""

    def __init__(self, upstream: str) -> None:
        self.raw: list[bytes] = []
        self._up = grpc.insecure_channel(upstream)
        call = self._up.unary_unary(DELIVER_METHOD)

        def relay(raw: bytes, context) -> bytes:
            self.raw.append(raw)
            return call(raw, timeout=T)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            SERVICE, {"Deliver": grpc.unary_unary_rpc_method_handler(relay)}),))
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def close(self) -> None:
        self._server.stop(0).wait(2)
        self._up.close()


def test_a_recorded_run_replayed_into_a_new_one_is_refused():
    g1, h1 = _pair()
    rec = Recorder(h1.address)
    g1.add_peer("host", rec.address)
    try:
        for i in range(3):
            g1.send("host", "grad", f"epoch {i}".encode())
        assert [h1.recv("guest", "grad") for _ in range(3)] == [b"epoch 0", b"epoch 1", b"epoch 2"]
    finally:
        g1.close()
        h1.close()
        rec.close()
    assert len(rec.raw) >= 4                                # the hello and three messages
    # the next run of the same job: a fresh host; the attacker replays the whole recording
    g2, h2 = _pair()
    try:
        with grpc.insecure_channel(h2.address) as ch:
            acks = [Ack.FromString(ch.unary_unary(DELIVER_METHOD)(raw, timeout=T))
                    for raw in rec.raw]
        envs = [Envelope.FromString(raw) for raw in rec.raw]
        data = [a for e, a in zip(envs, acks) if e.seq > 0]
        assert len(data) == 4 and all(a.error_code == ErrorCode.SESSION for a in data)
        assert "another run" in data[0].error
        # no trace: nothing queued, the guest's stream not broken, the real guest is welcome
        with pytest.raises(PeerTimeout):
            h2.recv("guest", "grad", timeout=0.3)
        g2.send("host", "grad", b"fresh")
        assert h2.recv("guest", "grad") == b"fresh"
        assert h2.stats["messages_received"] == 1
    finally:
        g2.close()
        h2.close()


def test_data_without_a_handshake_is_refused_without_a_trace():
    g, h = _pair()
    try:
        with grpc.insecure_channel(h.address) as ch:
            ack = Ack.FromString(ch.unary_unary(DELIVER_METHOD)(_env(job_id="job1"), timeout=T))
        assert ack.error_code == ErrorCode.SESSION and "no hello" in ack.error
        with pytest.raises(PeerTimeout):
            h.recv("guest", "t", timeout=0.3)
    finally:
        g.close()
        h.close()


def test_a_second_session_from_the_same_sender_is_refused():
    g1, h = _pair()
    g2 = GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "job1", timeout_s=T)
    try:
        g1.send("host", "t", b"first")
        with pytest.raises(SessionError, match="second session"):
            g2.send("host", "t", b"impostor")
        assert h.recv("guest", "t") == b"first"
        with pytest.raises(SessionError):          # and the host is told, not left waiting
            h.recv("guest", "t", timeout=T)
    finally:
        for t in (g1, g2, h):
            t.close()


def test_a_second_session_is_accepted_when_the_job_resumes():
    g1, h = _pair(resume=True)
    try:
        g1.send("host", "t", b"before the crash")
        assert h.recv("guest", "t") == b"before the crash"
        g1_session = g1.session
        g1.close()                                  # the guest restarts
        g2 = GrpcTransport("guest", "127.0.0.1:0", {"host": h.address}, "job1", timeout_s=T)
        assert g2.session != g1_session
        g2.send("host", "t", b"after the restart")
        assert h.recv("guest", "t") == b"after the restart"
        # the old incarnation's session is retired: its envelopes are refused now
        with grpc.insecure_channel(h.address) as ch:
            call = ch.unary_unary(DELIVER_METHOD)
            nonce = Ack.FromString(call(_env(job_id="job1", tag=HELLO_TAG, seq=0, payload=b""),
                                        timeout=T)).session
            ack = Ack.FromString(call(_env(job_id="job1", session=g1_session, seq=2,
                                           peer_session=nonce), timeout=T))
        assert ack.error_code == ErrorCode.SESSION and "replaced" in ack.error
        g2.close()
    finally:
        h.close()


def test_job_resume_reaches_the_transport(tmp_path):
    from unifl.app.params import load_job
    job = load_job(_write(tmp_path, "job_id: j\nalgorithm: psi\nresume: true\n", "job.yaml"))
    assert job.resume is True and "resume" not in job.to_job()


# ---- a network partition ends the wait within liveness_s ------------------------------
from tests.helpers.proxy import PausableProxy  # noqa: E402


def _partition_pair(liveness_s: float):
    g = GrpcTransport("guest", "127.0.0.1:0", {}, "job1", timeout_s=60.0, liveness_s=liveness_s)
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": g.address}, "job1", timeout_s=60.0)
    proxy = PausableProxy(h.address)
    g.add_peer("host", proxy.address)
    g.send("host", "hello", b"x")                  # the guest has seen the host alive
    assert h.recv("guest", "hello") == b"x"
    return g, h, proxy


def test_a_network_partition_ends_the_wait_within_liveness_not_timeout():
    g, h, proxy = _partition_pair(liveness_s=2.0)
    try:
        proxy.partition()                          # host alive, but nothing gets through
        t0 = time.monotonic()
        with pytest.raises(PeerUnavailable, match=r"\[reply\] from host.*partitioned"):
            g.recv("host", "reply", timeout=15.0)  # (bounded, so the old code fails in 15 s)
        assert time.monotonic() - t0 < 10.0
    finally:
        proxy.close()
        g.close()
        h.close()


def test_a_partition_shorter_than_liveness_does_not_end_the_wait():
    g, h, proxy = _partition_pair(liveness_s=3.0)
    try:
        proxy.partition()                          # pings every 0.75 s, each unanswered for 1 s
        threading.Timer(2.0, proxy.heal).start()   # the one in flight at 2 s is answered
        t0 = time.monotonic()
        with pytest.raises(PeerTimeout):
            g.recv("host", "reply", timeout=6.0)
        assert time.monotonic() - t0 >= 5.9
    finally:
        proxy.close()
        g.close()
        h.close()


def test_refused_envelopes_cannot_flood_or_forge_the_log(caplog):
    """Anyone who reaches the port can send envelopes the party refuses.  Each refusal is counted,
    but only a burst per window is logged, and the peer's sender and tag are logged as reprs, so a
    newline in them cannot forge a log line."""
    from unifl.app.transport import grpc_transport as gt
    h = GrpcTransport("host", "127.0.0.1:0", {"guest": "127.0.0.1:1"}, "j", timeout_s=T)
    try:
        caplog.set_level("WARNING", logger="unifl.transport")
        for i in range(500):
            h._deliver(_env(sender=f"mallory\nINFO forged line {i}", tag="x\ny"), None)
        refusals = [r for r in caplog.records if "refused a message" in r.getMessage()]
        assert h.stats["refused"] == 500
        assert len(refusals) == gt.REFUSAL_LOG_BURST
        assert all("\n" not in r.getMessage() for r in refusals)
        assert "'mallory\\nINFO forged line 0'" in refusals[0].getMessage()
    finally:
        h.close()
