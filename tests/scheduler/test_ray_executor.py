"""executor: ray -- a party's batches on the worker actors of its own Ray cluster.

Every test runs against a real local multi-node cluster (``ray.cluster_utils.Cluster``: two nodes,
each its own raylet and object store, on the loopback, usage statistics off), started once for the
module with a bounded start-up and one retry.  Checked: every op of the contract bit-identical to
``cpu`` with pieces on both nodes; the report naming node and worker; the private key staying in the
party's process; a worker killed mid-batch (its piece re-run on the other, nothing computed twice),
then every worker gone (the party's own chain takes over); the config errors, bounded in time; a
two-party vertical LR whose guest computes on the cluster, equal to the reference model.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time

import numpy as np
import pytest

# loopback only: Ray otherwise binds the machine's routable address, even for a local cluster
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray", reason="executor: ray needs Ray (pip install 'unifl[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

import unifl  # noqa: E402
from unifl import base_op, mod_op  # noqa: E402
from unifl.app.jobs import run_local  # noqa: E402
from unifl.configs import PartyConfig, load_party  # noqa: E402
from unifl.core import registry  # noqa: E402
from unifl.core.contract import OPS, SECRET_OPS  # noqa: E402
from unifl.core.errors import BackendUnavailable, ConfigError  # noqa: E402
from unifl.scheduler import backend_from_config  # noqa: E402
from unifl.scheduler.fallback import run_op  # noqa: E402
from unifl.scheduler.ray import RayBackend  # noqa: E402

from tests.helpers.keys import random_odd_modulus  # noqa: E402
from tests.helpers.vertical_jobs import assert_same_model, job, reference_for  # noqa: E402
from tests.helpers.op_inputs import GENERATORS, _keys, _same  # noqa: E402

pytestmark = pytest.mark.ray

CPU = registry.backend("cpu")
LOCAL = "native" if registry.probe("native").available else "cpu"
STORE = 80 * 2**20           # the smallest object store Ray accepts is 75 MiB


def _start_cluster() -> Cluster:
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "object_store_memory": STORE, "include_dashboard": False})
    c.add_node(num_cpus=2, object_store_memory=STORE)
    c.wait_for_nodes(timeout=60)
    return c


@pytest.fixture(scope="module")
def cluster():
    last: Exception | None = None
    for _attempt in range(2):           # a port taken between probe and bind: try once more
        try:
            c = _start_cluster()
            break
        except Exception as exc:  # noqa: BLE001 - retried once, then reported
            last = exc
            time.sleep(1)
    else:
        pytest.fail(f"a local two-node Ray cluster did not start: {last}")
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def ray_config(cluster: Cluster, **section) -> PartyConfig:
    # every op and batch to the workers, unless a test says otherwise
    ray_section = {"address": cluster.address, "workers": 2, "start_timeout_s": 60,
                   "min_rows": 4, "local_ops": [], **section}
    return PartyConfig.model_validate({"party": "guest", "backend": LOCAL, "fallback": ["cpu"],
                                       "executor": "ray", "ray": ray_section})


@pytest.fixture
def ray_be(cluster):
    be = backend_from_config(ray_config(cluster))
    yield be
    be.close()


def nodes_of(rows: list[dict]) -> set[str]:
    return {r["device"].split(" · ")[1] for r in rows if r["device"].startswith("ray worker")
            and r["calls"] > 0}


# ------------------------------------------------------------------ equivalence
@pytest.mark.parametrize("private_key_ops", ["workers", "local"])
def test_every_op_is_bit_identical_to_cpu_with_pieces_on_both_nodes(cluster, private_key_ops):
    be = backend_from_config(ray_config(cluster, private_key_ops=private_key_ops))
    try:
        assert isinstance(be, RayBackend) and len(be.selection.ray["nodes"]) == 2
        # the secret ops last: once a modulus served a secret op it is treated as secret, and the
        # generators share their moduli
        for op in sorted(OPS, key=lambda o: o in SECRET_OPS):
            for args in GENERATORS[op]():
                assert _same(getattr(be, f"op_{op}")(*args), run_op(CPU, op, args)), op
        rows = be.report()
        on_workers = {r["op"] for r in rows if r["device"].startswith("ray worker")}
        if private_key_ops == "workers":
            assert on_workers == set(OPS)
        else:                            # the private key never left the party's process
            assert on_workers == set(OPS) - SECRET_OPS
            assert {r["op"] for r in rows if not r["device"].startswith("ray worker")} \
                >= SECRET_OPS
        assert len(nodes_of(rows)) == 2
    finally:
        be.close()


def test_layers_on_ray_give_the_same_results_as_cpu(ray_be):
    """The SDK's own path (EncryptedArray) through the cluster: encryption, a plaintext-matrix
    product X @ E(x) (multi-exponentiations) and decryption give what cpu gives; workers ran
    them."""
    pk, sk = unifl.keygen(1024)
    x = np.array([secrets.randbelow(10**6) - 5 * 10**5 for _ in range(300)], dtype=np.int64)
    w = np.array([[secrets.randbelow(1000) - 500 for _ in range(300)] for _ in range(3)],
                 dtype=np.int64)
    enc = unifl.EncryptedArray.encrypt(pk, x, backend=ray_be)
    assert np.array_equal(enc.decrypt(sk), x)
    prod = w @ enc
    assert np.array_equal(prod.decrypt(sk), w @ x)
    ops = {r["op"] for r in ray_be.report() if r["device"].startswith("ray worker")}
    assert {"paillier_encrypt", "mont_multi_exp"} <= ops


def test_the_report_names_node_and_worker_of_each_piece(ray_be):
    ctx = base_op.mont_context(random_odd_modulus(2048))
    a = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(64)])
    e = mod_op.exp_limbs([secrets.randbits(128) for _ in range(64)])
    assert _same(mod_op.mod_exp(ray_be, ctx, a, e), mod_op.mod_exp(CPU, ctx, a, e))
    rows = [r for r in ray_be.report() if r["op"] == "mod_exp"]
    assert sorted(r["elements"] for r in rows) == [32, 32]
    node_ids = {n[:8] for n in ray_be.selection.ray["nodes"]}
    for r in rows:
        worker, node, ip, backend = r["device"].split(" · ")
        assert worker.startswith("ray worker ") and node.split()[1] in node_ids
        assert ip == "127.0.0.1" and backend == r["backend"] == LOCAL
    # the workers' own records agree: each ran exactly its piece
    own = ray_be.worker_reports()
    assert sorted(sum(x["elements"] for x in rs if x["op"] == "mod_exp") for rs in own.values()) \
        == [32, 32]


def test_contexts_and_keys_cross_once_per_worker(ray_be):
    """A context is put in the object store once and each worker keeps the object it resolved,
    so its backend's per-modulus state is built once, not per call."""
    ctx = base_op.mont_context(random_odd_modulus(1024))
    a = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(40)])
    for _ in range(5):
        base_op.mont_mul(ray_be, ctx, a, a)
    stats = [ray.get(p.actor.stats.remote()) for p in ray_be.proxies]
    assert [s["shared_fetched"] for s in stats] == [1, 1]


def test_an_array_every_piece_needs_is_put_in_the_store_once(ray_be):
    """A multi-exponentiation split over its K outputs sends all N bases to every worker: they go
    into the object store once per call, not once per piece."""
    ctx = base_op.mont_context(random_odd_modulus(2048))
    n = 1200                                     # 1200 x 256 B of bases: above BLOB_BYTES
    bases = base_op.to_mont(CPU, ctx, ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(n)]))
    exps = np.stack([mod_op.exp_limbs([secrets.randbits(64) for _ in range(n)])
                     for _ in range(4)])
    before = ray_be.shipper.blobs_put
    assert _same(mod_op.mont_multi_exp(ray_be, ctx, bases, exps),
                 mod_op.mont_multi_exp(CPU, ctx, bases, exps))
    assert ray_be.shipper.blobs_put - before == 1
    assert len(nodes_of(ray_be.report())) == 2


# ------------------------------------------------------------------ the private key
def test_the_private_key_stays_in_the_party_process(ray_be):
    pk, sk = _keys()
    m = np.asarray(unifl.phe_sdk.paillier.encrypt_limbs(CPU, pk, _plain(pk, 64)))
    ray_be.op_paillier_decrypt(sk.material, m)
    # a public op on a secret modulus (p²) stays here too, once the key has been seen
    p2 = sk.material.psquare_ctx
    x = p2.to_limbs([secrets.randbelow(p2.m) for _ in range(64)])
    base_op.mont_mul(ray_be, p2, x, x)
    for rows in ray_be.worker_reports().values():
        assert not {r["op"] for r in rows} & (SECRET_OPS | {"mont_mul"})
    # and shipping it by mistake fails closed instead of sending it
    with pytest.raises(PermissionError, match="private key record"):
        ray_be.proxies[0].op_paillier_decrypt(sk.material, m)


def _plain(pk, n: int) -> np.ndarray:
    return pk.n_ctx.to_limbs([secrets.randbelow(pk.n) for _ in range(n)])


# ------------------------------------------------------------------ faults
def _slow_batch(rows: int):
    """A batch that keeps a worker busy for a second or more: 2048-bit ModExps, full exponents."""
    ctx = base_op.mont_context(random_odd_modulus(2048))
    a = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(rows)])
    e = mod_op.exp_limbs([secrets.randbits(2048) for _ in range(rows)])
    return ctx, a, e


def _kill_when_busy(proxy, delay: float) -> threading.Thread:
    def kill() -> None:
        time.sleep(delay)
        ray.kill(proxy.actor, no_restart=True)
    t = threading.Thread(target=kill)
    t.start()
    return t


def test_a_worker_killed_mid_batch_has_its_piece_rerun_on_another(cluster, caplog):
    be = backend_from_config(ray_config(cluster, private_key_ops="local"))
    try:
        local = registry.backend(LOCAL)
        ctx, a, e = _slow_batch(600)
        want = mod_op.mod_exp(local, ctx, a, e)
        victim, survivor = be.proxies
        killer = _kill_when_busy(victim, 0.4)
        got = mod_op.mod_exp(be, ctx, a, e)
        killer.join()
        assert _same(got, want)
        ev, = be.fallback_events()
        assert ev["scope"] == "piece" and ev["from_device"] == victim.device
        assert ev["to_device"] == survivor.device and ev["elements"] == 300
        assert "RayWorkerLost" in ev["reason"]
        assert [p.device for p in be.live_workers()] == [survivor.device]
        rows = {r["device"]: r for r in be.report() if r["op"] == "mod_exp"}
        # nothing lost, nothing twice: the survivor computed its piece and the lost one, once each
        assert rows[survivor.device]["elements"] == 600 and rows[survivor.device]["calls"] == 2
        assert rows[victim.device]["calls"] == 0 and rows[victim.device]["failed_elements"] == 300
        own, = be.worker_reports().values()
        assert sum(r["elements"] for r in own if r["op"] == "mod_exp") == 600
        assert be.selection.ray["live"] == 1 and be.lost_workers()[0]["worker"] == victim.device
        assert any("1 of 2 devices left" in r.getMessage() for r in caplog.records)
        # the next batch goes whole to the survivor
        ctx2, a2, e2 = _slow_batch(40)
        assert _same(mod_op.mod_exp(be, ctx2, a2, e2), mod_op.mod_exp(local, ctx2, a2, e2))
        rows = {r["device"]: r for r in be.report() if r["op"] == "mod_exp"}
        assert rows[survivor.device]["elements"] == 640
        # the last worker dies mid-batch too: the party's own chain computes, and every later batch
        killer = _kill_when_busy(survivor, 0.4)
        assert _same(mod_op.mod_exp(be, ctx, a, e), want)
        killer.join()
        assert be.live_workers() == []
        assert _same(mod_op.mod_exp(be, ctx2, a2, e2), mod_op.mod_exp(local, ctx2, a2, e2))
        here = [r for r in be.report() if r["op"] == "mod_exp"
                and not r["device"].startswith("ray worker")]
        assert sum(r["elements"] for r in here) == 600 + 40
        assert be.fallback_events()[-1]["to_device"] == "the party's process"
    finally:
        be.close()


def test_a_worker_that_stops_answering_is_stopped_and_its_piece_rerun(cluster):
    be = backend_from_config(ray_config(cluster, piece_timeout_s=0.5))
    try:
        slow, other = be.proxies
        ctx, a, e = _slow_batch(8)
        want = mod_op.mod_exp(registry.backend(LOCAL), ctx, a, e)
        # worker 0 is busy with a long batch of its own when the party's piece reaches it
        big = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(2000)])
        busy = slow.actor.run.remote("mod_exp", (ctx, big, mod_op.exp_limbs(
            [secrets.randbits(2048) for _ in range(2000)])))
        assert _same(mod_op.mod_exp(be, ctx, a, e), want)
        ev, = be.fallback_events()
        assert ev["from_device"] == slow.device and "did not answer within 0.5 s" in ev["reason"]
        assert [p.device for p in be.live_workers()] == [other.device]
        with pytest.raises(ray.exceptions.RayError):      # it was stopped, not left running
            ray.get(busy, timeout=30)
    finally:
        be.close()


def test_a_local_instance_listens_on_the_loopback_only():
    """address: null serves the party's process alone: its GCS and workers bind 127.0.0.1, not the
    machine's network address (Ray's default), checked in a fresh process that imports Ray after
    UniFL decided, as a party process does."""
    import subprocess
    import sys
    code = (
        "from unifl.configs import PartyConfig\n"
        "from unifl.scheduler import backend_from_config\n"
        "be = backend_from_config(PartyConfig.model_validate({'party': 'guest', 'executor': 'ray',"
        " 'ray': {'address': None, 'workers': 1, 'start_timeout_s': 60}}))\n"
        "print(be.selection.ray['gcs_address'], be.proxies[0].info['node_ip'])\n"
        "be.close()\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    gcs, node_ip = out.stdout.split()[-2:]
    assert gcs.startswith("127.0.0.1:") and node_ip == "127.0.0.1"


# ------------------------------------------------------------------ configuration errors
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_cluster_at_the_address_is_a_config_error_within_the_timeout():
    port = _free_port()
    cfg = PartyConfig.model_validate({"party": "guest", "executor": "ray",
                                      "ray": {"address": f"127.0.0.1:{port}",
                                              "start_timeout_s": 5}})
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=f"127.0.0.1:{port}.*no Ray cluster answers"):
        backend_from_config(cfg)
    assert time.perf_counter() - t0 < 10


def test_a_second_cluster_in_the_same_process_is_refused(ray_be):
    cfg = PartyConfig.model_validate({"party": "guest", "executor": "ray",
                                      "ray": {"address": f"127.0.0.1:{_free_port()}"}})
    with pytest.raises(ConfigError, match="already the driver of the Ray cluster"):
        backend_from_config(cfg)


def test_workers_that_cannot_start_their_backend_are_named(cluster):
    # gpu_host is registered in this test process only (conftest): the workers do not have it
    with pytest.raises(BackendUnavailable) as info:
        backend_from_config(ray_config(cluster, backend="gpu_host", start_timeout_s=30))
    msg = str(info.value)
    assert cluster.address in msg or "executor ray at" in msg
    assert "ray worker 0" in msg and "ray worker 1" in msg and "gpu_host" in msg


def test_workers_whose_resources_cannot_be_placed_give_up_in_bounded_time(cluster):
    t0 = time.perf_counter()
    with pytest.raises(BackendUnavailable, match="not started within 3 s.*num_gpus"):
        backend_from_config(ray_config(cluster, resources_per_worker={"CPU": 1, "GPU": 1},
                                       start_timeout_s=3))
    assert time.perf_counter() - t0 < 20


def test_ray_options_are_checked_by_the_schema():
    with pytest.raises(ValueError, match="executor is 'threads'"):
        PartyConfig.model_validate({"party": "guest", "ray": {"workers": 2}})
    with pytest.raises(ValueError, match="wrkers"):
        PartyConfig.model_validate({"party": "guest", "executor": "ray",
                                    "ray": {"wrkers": 2}})
    with pytest.raises(ValueError, match="HOST:PORT"):
        PartyConfig.model_validate({"party": "guest", "executor": "ray",
                                    "ray": {"address": "head-node"}})
    with pytest.raises(ValueError, match="unknown backend"):
        PartyConfig.model_validate({"party": "guest", "executor": "ray",
                                    "ray": {"backend": "tpu"}})
    with pytest.raises(ValueError, match="not ops of the contract"):
        PartyConfig.model_validate({"party": "guest", "executor": "ray",
                                    "ray": {"local_ops": ["montmul"]}})


def test_the_private_key_to_workers_without_tls_warns_at_every_start(cluster, caplog):
    """ray.insecure: true is the one way to send p and q to workers without Ray's TLS, and
    every start of the backend says so."""
    for _ in range(2):
        caplog.clear()
        be = backend_from_config(ray_config(cluster, private_key_ops="workers", insecure=True))
        be.close()
        assert any("p and q" in r.getMessage() and "UNENCRYPTED" in r.getMessage()
                   for r in caplog.records)


def test_a_local_instance_that_listens_on_the_network_gets_no_private_key(monkeypatch):
    """address null is loopback-only -- unless Ray was imported before with another setting, or
    the embedding program joined a cluster: then the GCS address decides, before any worker."""
    from unifl.scheduler.ray import cluster as ray_cluster
    from unifl.scheduler.ray import start as ray_start
    joined = ray_cluster.Connection(address=None, gcs_address="10.1.2.3:6379", owned=False,
                                    users=1)
    monkeypatch.setattr(ray_start, "connect", lambda *a: joined)
    monkeypatch.setattr(ray_start, "release", lambda conn: None)
    monkeypatch.setattr(ray_start, "start_workers", lambda *a: pytest.fail("workers started"))
    cfg = PartyConfig.model_validate({"party": "guest", "backend": LOCAL, "executor": "ray",
                                      "ray": {"private_key_ops": "workers"}})
    with pytest.raises(ConfigError, match="10.1.2.3:6379.*without TLS"):
        backend_from_config(cfg)


def test_cheap_ops_stay_in_the_party_process_by_default(cluster):
    """A MontMult per element costs less to compute than to ship: by default (local_ops) it never
    reaches a worker, whatever the batch size; an encryption does."""
    cfg = ray_config(cluster)
    data = cfg.model_dump()
    del data["ray"]["local_ops"]
    be = backend_from_config(PartyConfig.model_validate(data))
    try:
        ctx = base_op.mont_context(random_odd_modulus(2048))
        a = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(500)])
        assert _same(base_op.mont_mul(be, ctx, a, a), base_op.mont_mul(CPU, ctx, a, a))
        e = mod_op.exp_limbs([secrets.randbits(64) for _ in range(500)])
        assert _same(mod_op.mod_exp(be, ctx, a, e), mod_op.mod_exp(CPU, ctx, a, e))
        on_workers = {r["op"] for r in be.report() if r["device"].startswith("ray worker")}
        assert "mod_exp" in on_workers and "mont_mul" not in on_workers
    finally:
        be.close()


def test_executor_ray_in_a_fate_workers_config_is_refused_not_ignored(tmp_path, monkeypatch):
    from unifl.fate import party as fate_party
    path = tmp_path / "party.yaml"
    path.write_text("party: guest\nbackend: native\nexecutor: ray\n")
    monkeypatch.delenv("UNIFL_BACKEND", raising=False)
    monkeypatch.setenv("UNIFL_CONFIG", str(path))
    fate_party.set_backend(None)
    with pytest.raises(ConfigError, match="executor: ray does not apply inside FATE"):
        fate_party.current_backend()
    fate_party.set_backend(None)


# ------------------------------------------------------------------ an app on the cluster
def test_vertical_lr_with_the_guest_on_ray_gives_the_reference_model(cluster):
    """The shipped guest_ray.yaml, pointed at the two-node cluster: a two-party vertical LR whose
    guest computes there and whose host runs native gives the reference model, bit for bit the
    model of an all-native run, with pieces on both nodes."""
    data = load_party("guest_ray.yaml").model_dump()
    data["ray"]["address"] = cluster.address
    data["ray"]["min_rows"] = 4
    guest = backend_from_config(PartyConfig.model_validate(data))
    try:
        j = job("vlr", epochs=2, batch_size=128)
        res = run_local(j, unifl.backend(LOCAL), backends={"guest": guest,
                                                           "host": unifl.backend(LOCAL)})
        assert_same_model(res, reference_for(j))
        plain = run_local(j, unifl.backend(LOCAL))
        for role in ("guest", "host"):
            assert res[role]["model"]["weights"] == plain[role]["model"]["weights"]
        rows = guest.report()
        assert len(nodes_of(rows)) == 2
        # the guest's own key never left its process: decryption and its encryptions ran here
        assert not {r["op"] for r in rows if r["device"].startswith("ray worker")} & SECRET_OPS
    finally:
        guest.close()
