"""``ray.private_key_ops: workers`` ships p and q to the worker actors of the party's Ray cluster:
off the loopback that needs Ray's TLS, as the party's own links need mutual TLS.  Played here as a
careless config (the key would cross the cluster's network in clear) and checked at load, before
anything connects; what the party does at start with ``ray.tls`` / ``ray.insecure`` is tested
against a real cluster in tests/scheduler/test_ray_executor.py."""

from __future__ import annotations

import pytest

from unifl.configs import PartyConfig, load_party, validate
from unifl.core.errors import ConfigError
from unifl.party import warn_if_insecure

pytestmark = pytest.mark.ray


def _cfg(**ray):
    return {"party": "guest", "backend": "cpu", "fallback": ["cpu"], "executor": "ray",
            "ray": {"private_key_ops": "workers", **ray}}


@pytest.mark.parametrize("address", ["10.0.0.7:6379", "head.bank.internal:6379", "auto",
                                     "[2001:db8::1]:6379", "0.0.0.0:6379"])
def test_the_private_key_to_workers_off_the_loopback_without_tls_is_refused(tmp_path, address):
    p = tmp_path / "guest.yaml"
    p.write_text(f"party: guest\nexecutor: ray\nray: {{address: '{address}', "
                 "private_key_ops: workers}\n")
    with pytest.raises(ConfigError) as err:
        load_party(p)
    msg = str(err.value)
    assert "field 'ray'" in msg and "private_key_ops: workers" in msg and "ray.tls" in msg, msg
    assert "ray.insecure" in msg


@pytest.mark.parametrize("ray", [
    {"address": "127.0.0.1:6379"}, {"address": None}, {"address": "localhost:6379"},
    {"address": "10.0.0.7:6379", "private_key_ops": "local"},
    {"address": "10.0.0.7:6379", "tls": {"cert": "n.pem", "key": "n.key", "ca": "ca.pem"}},
    {"address": "auto", "insecure": True}])
def test_what_stays_allowed(ray):
    cfg = validate(PartyConfig, _cfg(**ray), "cfg")
    assert cfg.ray is not None


def test_insecure_warns_at_every_start(capsys):
    cfg = validate(PartyConfig, _cfg(address="10.0.0.7:6379", insecure=True), "cfg")
    for _ in range(2):
        assert warn_if_insecure(cfg)
        err = capsys.readouterr().err
        assert "ray.insecure" in err and "p and q" in err and "UNENCRYPTED" in err
    # with TLS (or the key kept local) nothing to say
    for ray in ({"address": "10.0.0.7:6379", "insecure": True,
                 "tls": {"cert": "n.pem", "key": "n.key", "ca": "ca.pem"}},
                {"address": "10.0.0.7:6379", "insecure": True, "private_key_ops": "local"}):
        assert not warn_if_insecure(validate(PartyConfig, _cfg(**ray), "cfg"))


def test_ray_tls_files_become_rays_environment(tmp_path, monkeypatch):
    from unifl.scheduler.ray.cluster import tls_environment
    for name in ("n.pem", "n.key", "ca.pem"):
        (tmp_path / name).write_text("x")
    cfg = validate(PartyConfig, _cfg(address="10.0.0.7:6379", tls={
        "cert": str(tmp_path / "n.pem"), "key": str(tmp_path / "n.key"),
        "ca": str(tmp_path / "ca.pem")}), "cfg")
    env = tls_environment(cfg.ray)
    assert env == {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": str(tmp_path / "n.pem"),
                   "RAY_TLS_SERVER_KEY": str(tmp_path / "n.key"),
                   "RAY_TLS_CA_CERT": str(tmp_path / "ca.pem")}
    (tmp_path / "n.key").unlink()
    with pytest.raises(ConfigError, match="ray.tls.key"):
        tls_environment(cfg.ray)
