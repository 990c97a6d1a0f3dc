"""Party and job YAML: every shipped example loads; errors name the file, the field and what is allowed."""

from __future__ import annotations

import pytest

from unifl.configs import EXAMPLES_DIR, JobConfig, PartyConfig, load_job, load_party
from unifl.core.errors import ConfigError


def _write(tmp_path, text, name="party.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("path", sorted(EXAMPLES_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_example_loads(path):
    if path.name.startswith(("guest", "host", "arbiter")):
        cfg = load_party(path)
        assert cfg.party == path.name.split("_")[0]
        assert cfg.key_bits >= 1024
        assert cfg.party not in cfg.network.peers
    else:
        job = load_job(path).to_job()
        assert {"job_id", "algorithm", "dataset", "parties", "seed", "key_bits", "params"} <= set(job)


def test_shipped_examples_cover_every_backend():
    names = {p.name for p in EXAMPLES_DIR.glob("*.yaml")}
    assert {"guest_gpu.yaml", "host_fpga.yaml", "host_qat.yaml", "guest_fpga.yaml", "arbiter_cpu.yaml",
            "guest_native.yaml", "host_native.yaml", "demo_vlr_breast.yaml"} <= names


def test_defaults_and_backend_options():
    cfg = load_party("host_qat.yaml")
    assert cfg.backend == "qat" and cfg.fallback == ["native", "cpu"]
    assert cfg.backend_options("qat") == {"instances": "all", "max_in_flight": 96, "cpu_share": 0.0,
                                          "matmul_on_qat": False}
    assert cfg.backend_options("fpga") == {"engines": 16}     # unset (None) values left to the backend
    assert cfg.network.timeout_s == 120 and cfg.network.tls is None


@pytest.mark.parametrize("text,field,allowed", [
    ("party: guest\nbackend: tpu\n", "backend", "allowed: cpu"),
    ("party: referee\n", "party", "'guest', 'host' or 'arbiter'"),
    ("party: guest\nkey_bits: 512\n", "key_bits", "greater than or equal to 1024"),
    ("party: guest\nfallback: [native, abacus]\n", "fallback", "unknown backend 'abacus'"),
    ("party: guest\nfpga: {mode: turbo}\n", "fpga.mode", "'montmul' or 'modexp'"),
    ("party: guest\nfpga: {engins: 4}\n", "fpga.engins", "unknown field"),
    ("party: guest\nqat: {cpu_share: 1.0}\n", "qat.cpu_share", "less than 1"),
    ("party: guest\nqat: {instances: 0}\n", "qat.instances", "positive integer"),
    ("party: guest\nnetwork: {listen: nowhere}\n", "network.listen", "HOST:PORT"),
    ("party: guest\nnetwork: {peers: {guest: '127.0.0.1:1'}}\n", "(top level)", "own role"),
    ("party: guest\nnetwork: {peers: {judge: '127.0.0.1:1'}}\n", "network.peers.judge", "'guest', 'host' or 'arbiter'"),
    ("party: guest\ndevices: []\n", "devices", "non-empty"),
    ("party: guest\nencoding: {scale_bits: 30}\n", "encoding.scale_bits", "scale_bits=24"),
    ("party: guest\nnetwork: {tls: {cert: a.pem}}\n", "network.tls.key", "Field required"),
])
def test_errors_name_file_field_and_allowed_values(tmp_path, text, field, allowed):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_party(p)
    msg = str(err.value)
    assert str(p) in msg and f"field '{field}'" in msg and allowed in msg, msg


def test_missing_party_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="field 'party': Field required"):
        load_party(_write(tmp_path, "backend: cpu\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_party(_write(tmp_path, "party: [guest\n"))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_party(_write(tmp_path, "- guest\n"))
    with pytest.raises(ConfigError, match="no shipped config"):
        load_party("nonexistent_party.yaml")


def test_backend_names_not_in_this_checkout_are_accepted():
    # a config is portable: gpu may be absent here; the scheduler then falls back with the reason
    assert PartyConfig(party="guest", backend="gpu").backend == "gpu"
    assert PartyConfig(party="guest", backend="auto").backend == "auto"


def test_job_schema(tmp_path):
    job = load_job(_write(tmp_path, "job_id: j1\nalgorithm: psi+vlr\ndataset: breast\n", "job.yaml"))
    assert job.to_job()["parties"] == ["guest", "host"]
    for text, field in [("job_id: j1\nalgorithm: dnn\n", "algorithm"),
                        ("job_id: 'a b'\nalgorithm: vlr\n", "job_id"),
                        ("job_id: j\nalgorithm: vlr\nparties: [guest, guest]\n", "parties"),
                        ("job_id: j\nalgorithm: vlr\ndataset: mnist\n", "dataset"),
                        ("job_id: j\nalgorithm: vlr\nkey_bits: 768\n", "key_bits")]:
        with pytest.raises(ConfigError, match=f"field '{field}'"):
            load_job(_write(tmp_path, text, "job.yaml"))
    assert JobConfig(job_id="x", algorithm="vlr", dataset="/data/my.csv").dataset == "/data/my.csv"
