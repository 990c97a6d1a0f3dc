"""Party and job YAML: every shipped example loads; errors name the file, the field and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from unifl.app.params import JobConfig, load_job
from unifl.configs import EXAMPLES_DIR, PartyConfig, load_party, validate
from unifl.core import registry
from unifl.core.backend import Backend, ProbeResult
from unifl.core.errors import BackendUnavailable, ConfigError
from unifl.core.options import BackendOptions, BackendOptionsError, option
from unifl.scheduler import backend_from_config


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
    # what the section gives, as the backend's model read it; the model's defaults do the rest
    assert cfg.backend_options("qat") == {"library": None, "instances": "all", "max_in_flight": 96,
                                          "cpu_share": 0.0, "matmul_on_qat": False}
    assert cfg.backend_options("fpga") == {}                 # no section: nothing given
    assert cfg.options("fpga") == registry.options_model("fpga")()   # ...so the model's defaults
    assert cfg.options("qat").max_in_flight == 96 and cfg.options("qat").section is None
    assert cfg.network.timeout_s == 120 and cfg.network.tls is None
    # the defaults of backend and fallback are the registry's hardware-free chain
    bare = PartyConfig(party="guest")
    assert [bare.backend, *bare.fallback] == [registry.DEFAULT_CHAIN[0], *registry.DEFAULT_CHAIN]


def test_a_section_and_the_constructor_share_one_model():
    # the same value is refused with the same words from YAML and from the constructor
    with pytest.raises(ConfigError) as from_yaml:
        validate(PartyConfig, {"party": "guest", "qat": {"max_in_flight": 0}}, "cfg")
    with pytest.raises(BackendOptionsError) as from_code:
        registry.options_model("qat").parse({"max_in_flight": 0}, backend="qat")
    assert from_code.value.problems[0].message in str(from_yaml.value)
    # an int is widened for a float option, in the config as in the constructor
    cfg = PartyConfig(party="guest", qat={"cpu_share": 0})
    assert cfg.backend_options("qat") == {"cpu_share": 0.0}
    assert isinstance(cfg.backend_options("qat")["cpu_share"], float)


def test_model_dump_round_trips():
    # the CLI and run_party re-validate model_dump() with overrides: sections must survive it
    cfg = load_party("guest_fpga.yaml")
    again = validate(PartyConfig, cfg.model_dump(), "round trip")
    assert again == cfg and again.backend_options("fpga") == cfg.backend_options("fpga")


@pytest.mark.parametrize("text,field,allowed", [
    ("party: guest\nbackend: tpu\n", "backend", "unknown backend 'tpu'; allowed:"),
    ("party: referee\n", "party", "'guest', 'host' or 'arbiter'"),
    ("party: guest\nkey_bits: 512\n", "key_bits", "greater than or equal to 1024"),
    ("party: guest\nfallback: [native, abacus]\n", "fallback", "unknown backend 'abacus'"),
    ("party: guest\nfpga: {mode: turbo}\n", "fpga.mode", "'montmul' or 'modexp'"),
    ("party: guest\nfpga: {engins: 4}\n", "fpga.engins", "unknown field (backend 'fpga' takes: "),
    ("party: guest\nfpga: {engines: '4'}\n", "fpga.engines", "must be an integer"),
    ("party: guest\nfpga: {window: 9}\n", "fpga.window", "must be <= 8"),
    ("party: guest\nqat: {cpu_share: 1.0}\n", "qat.cpu_share", "must be < 1"),
    ("party: guest\nqat: {instances: 0}\n", "qat.instances", "must be >= 1"),
    ("party: guest\nqat: {instances: some}\n", "qat.instances", "'all' or an integer"),
    ("party: guest\nqat: {matmul_on_qat: 1}\n", "qat.matmul_on_qat", "true or false"),
    ("party: guest\nnative: {threads: 0}\n", "native.threads", "must be >= 1"),
    ("party: guest\nnative: 4\n", "native", "must be a mapping"),
    # a gpu instance runs on one device (option device); a list of devices is no option of it
    ("party: guest\ngpu: {devices: [0]}\n", "gpu.devices", "unknown field (backend 'gpu' takes: "),
    ("party: guest\nbackend: gpu\ndevices: [0, -1]\n", "devices.1.device", "must be >= 0"),
    ("party: guest\ndevices: [2, true]\n", "devices", "devices[1] must be a device selector"),
    ("party: guest\nbackend: cpu\ndevices: [0]\n", "devices.0", "no device selector"),
    # device entries are the backend's options too: checked at load, not at start
    ("party: guest\nbackend: native\ndevices: [2, 0]\n", "devices.1.threads", "must be >= 1"),
    ("party: guest\ndevices: [{backend: fpga, engins: 2}]\n", "devices.0.engins", "unknown field"),
    ("party: guest\nbackend: fpga\ndevices: [card0, 1]\n", "devices.1.device", "a string"),
    ("party: guest\nbogus: 1\n", "bogus", "neither a party setting nor a registered backend"),
    ("party: guest\nnetwork: {listen: nowhere}\n", "network.listen", "HOST:PORT"),
    ("party: guest\nnetwork: {peers: {guest: '127.0.0.1:1'}}\n", "(top level)", "own role"),
    ("party: guest\nnetwork: {peers: {judge: '127.0.0.1:1'}}\n", "network.peers.judge", "'guest', 'host' or 'arbiter'"),
    ("party: guest\ndevices: []\n", "devices", "non-empty"),
    ("party: guest\nencoding: {scale_bits: 0}\n", "encoding.scale_bits", "greater than or equal to 1"),
    ("party: guest\nencoding: {scale_bits: 2000}\n", "encoding.scale_bits", "at most 1074"),
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


@dataclass(frozen=True)
class _FarOptions(BackendOptions):
    lanes: int = option(8, "lanes per launch", ge=1)


class _FarAway(Backend):
    """Registered, with an options model, but never available here."""
    name = "faraway_cfgtest"
    native_ops = frozenset({"mont_mul"})
    options_model = _FarOptions

    @classmethod
    def probe(cls):
        return ProbeResult(False, "no far-away card in this machine")

    def op_mont_mul(self, ctx, a, b):  # pragma: no cover - never constructed
        raise AssertionError


@pytest.fixture
def far_away():
    registry.register("faraway_cfgtest", _FarAway)
    registry.register("ghost_cfgtest", "unifl_no_such_module_cfgtest:GhostBackend")
    yield
    for name in ("faraway_cfgtest", "ghost_cfgtest"):
        registry._BUILTIN.pop(name, None)
        registry._classes.pop(name, None)
        registry._probes.pop(name, None)
        registry._explicit.discard(name)


def test_registered_but_unavailable_backend_loads_checked_and_is_skipped(far_away):
    cfg = PartyConfig(party="guest", backend="faraway_cfgtest", fallback=["cpu"],
                      faraway_cfgtest={"lanes": 4})
    assert cfg.backend_options("faraway_cfgtest") == {"lanes": 4}
    # its section is still checked by its model where it cannot run
    with pytest.raises(ValueError, match="must be >= 1"):
        PartyConfig(party="guest", faraway_cfgtest={"lanes": 0})
    be = backend_from_config(cfg)
    assert be.selection.chosen == "cpu"
    assert "no far-away card" in be.selection.fallback_events[0]["reason"]


def test_registered_but_unimportable_backend_loads_and_is_skipped_with_the_reason(far_away):
    # its model cannot be read here, so its section is kept for the machines where it imports
    cfg = PartyConfig(party="guest", backend="ghost_cfgtest", fallback=["cpu"],
                      ghost_cfgtest={"anything": 1})
    assert cfg.backend_options("ghost_cfgtest") == {"anything": 1}
    with pytest.raises(BackendUnavailable, match="cannot be imported"):
        cfg.options("ghost_cfgtest")
    be = backend_from_config(cfg)
    assert be.selection.chosen == "cpu"
    assert "unifl_no_such_module_cfgtest" in be.selection.fallback_events[0]["reason"]


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
    # parameters are checked against the algorithm's own model, naming the field
    for text, field in [("job_id: j\nalgorithm: vlr\nparams: {epoch: 3}\n", "params.epoch"),
                        ("job_id: j\nalgorithm: hlr\nparams: {rounds: -1}\n", "params.rounds"),
                        ("job_id: j\nalgorithm: vlr\nparams: {drop_fraction: 0.1}\n",
                         "params.drop_fraction"),
                        ("job_id: j\nalgorithm: secureboost\nparams: {num_bins: 1}\n",
                         "params.num_bins")]:
        with pytest.raises(ConfigError, match=f"field '{field}'"):
            load_job(_write(tmp_path, text, "job.yaml"))
    text = "job_id: j\nalgorithm: psi+vlr\nparams: {drop_fraction: 0.1}\n"
    assert load_job(_write(tmp_path, text, "job.yaml")).params.drop_fraction == 0.1


def test_party_encoding_scale_is_optional():
    """Unset, each algorithm keeps its own scale; set, any scale the encoder takes."""
    assert PartyConfig(party="guest").encoding.scale_bits is None
    assert PartyConfig(party="guest", encoding={"scale_bits": 40}).encoding.scale_bits == 40
