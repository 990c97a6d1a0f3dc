"""Real FATE-Flow 2.2.0 jobs with UniFL's provider (FATE venv only: `make test-fate`).

One standalone FATE-Flow server on free ports of 127.0.0.1, home $UNIFL_FATE_FLOW_HOME (default
build/fate-flow/home, wiped at the start of each run), stopped by the fixture's finaliser whatever
happens.  Breast is uploaded from unifl/app/data; one job runs Reader -> PSI -> coordinated LR and
hetero SecureBoost, each with kind paillier (FATE's built-ins) and kind unifl (UniFL's components on
provider fate:2.2.0-unifl@local).  Failure cases: no server, provider not registered, a worker whose
UniFL backend is unavailable.  About 5 minutes on 2 cores (sizes chosen for CI: 1024-bit keys,
LR 3 epochs, SecureBoost 2 trees of depth 3).
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("fate_flow") is None or importlib.util.find_spec("fate_client") is None:
    pytest.skip("fate_flow/fate_client 2.2.0 are not installed here: they live in the FATE venv "
                "(`make test-fate`)", allow_module_level=True)

from unifl.fate import flow  # noqa: E402
from tests.helpers.paths import ROOT as REPO_ROOT

# one server for the module (its fixture), so the module stays on one worker
pytestmark = [pytest.mark.fate, pytest.mark.xdist_group("fate_flow_server")]

ROOT = REPO_ROOT
HOME = Path(os.environ.get("UNIFL_FATE_FLOW_HOME", ROOT / "build" / "fate-flow" / "home"))
RESULTS = HOME.parent / "results-breast.json"
AUC_TOLERANCE = 0.005


def test_plugin_dist_info_lists_pyproject_entry_points_and_loads(tmp_path):
    """The generated dist-info declares exactly pyproject.toml's components, and FATE's
    pkg_resources loads each from it in this venv (unifl's own metadata cannot: it requires
    pydantic 2)."""
    import tomllib                      # Python 3.11+, as FATE's venv
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"][flow.ENTRY_POINT_GROUP]
    assert all(target == f"unifl.fate.components:{name}" for name, target in declared.items())
    assert tuple(declared) == flow.COMPONENTS
    folder = flow.write_provider_folder(tmp_path / "provider")
    assert (folder / "unifl").resolve() == (ROOT / "unifl").resolve()
    code = ("import pkg_resources, json; eps = list(pkg_resources.iter_entry_points("
            f"{flow.ENTRY_POINT_GROUP!r})); print(json.dumps(sorted((e.name, e.load().name) "
            "for e in eps)))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(folder)     # the worker's path on UniFL's provider, nothing else
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == sorted([n, n] for n in flow.COMPONENTS)
    # writing again (another version's shim left over) keeps one dist-info only
    (folder / "unifl_fate_plugin-0.0.1.dist-info").mkdir()
    flow.write_provider_folder(folder)
    shims = [p.name for p in folder.glob("*.dist-info")]
    assert shims == [f"unifl_fate_plugin-{flow.unifl.__version__}.dist-info"]


def test_no_server_gives_a_clear_error(tmp_path):
    nobody = flow.FlowServer(tmp_path / "home", http_port=flow.free_port())
    with pytest.raises(flow.FateFlowNotRunning, match=r"FATE-Flow is not running at http://127\.0\.0\.1"):
        nobody.health()
    with pytest.raises(flow.FateFlowNotRunning, match="start it with"):
        flow.run_job(nobody, "breast_hetero", [flow.ModelSpec("lr", "unifl")])
    # the command line says the same and exits non-zero
    (tmp_path / "home" / "conf").mkdir(parents=True)
    (tmp_path / "home" / "conf" / "service_conf.yaml").write_text(
        f"fateflow: {{host: 127.0.0.1, http_port: {nobody.http_port}, grpc_port: 1}}\n")
    proc = subprocess.run([sys.executable, "-m", "unifl.fate.flow", "status", "--home",
                           str(tmp_path / "home")], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 1 and "FATE-Flow is not running at" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def server():
    marker = HOME / flow.HOME_MARKER
    if HOME.exists() and marker.exists():      # a previous run's home: start from an empty DB
        shutil.rmtree(HOME)
    srv = flow.FlowServer(HOME, sys.executable, http_port=flow.free_port(),
                          grpc_port=flow.free_port())
    srv.init()
    try:
        srv.start(timeout=180)
        yield srv
    finally:
        srv.stop()


def test_server_up_on_its_own_home_and_ports(server):
    info = server.health()
    assert any(v.get("version") == flow.FATE_VERSION for v in info.values()), info
    assert server.bound_conf_path() == str(HOME / "conf")


def test_unregistered_provider_is_refused_before_submitting(server):
    with pytest.raises(flow.ProviderNotRegistered, match="has no provider fate:2.2.0-unifl@local"):
        flow.run_job(server, "breast_hetero", [flow.ModelSpec("lr", "unifl")])


@pytest.fixture(scope="module")
def breast(server):
    config = server.register_provider()
    assert config["metadata"]["venv"] == server.venv_python
    seconds = flow.upload(server, "breast_hetero")
    return seconds


def test_unifl_jobs_reach_paillier_auc(server, breast):
    specs = [flow.ModelSpec("lr", kind, epochs=3) for kind in ("paillier", "unifl")]
    specs += [flow.ModelSpec("sbt", kind, trees=2, depth=3) for kind in ("paillier", "unifl")]
    # one job, the four model tasks side by side on PSI's output (1 core each of the job's 4)
    result = flow.run_job(server, "breast_hetero", specs, timeout=900, task_cores=1)
    RESULTS.write_text(json.dumps({"upload_s": breast, **result.to_json()}, indent=1))
    by = {(m.algo, m.kind): m for m in result.models}
    for algo in ("lr", "sbt"):
        ref, ours = by[(algo, "paillier")], by[(algo, "unifl")]
        assert ours.component.startswith("unifl_") and ours.provider == flow.PROVIDER
        assert ref.provider is None and not ref.component.startswith("unifl_")
        assert 0.9 < ref.auc <= 1.0, ref
        assert abs(ours.auc - ref.auc) <= AUC_TOLERANCE, (ours, ref)
        assert ours.guest_task_s > 0 and ref.guest_task_s > 0


def _unavailable_backend() -> str:
    from unifl.core import registry
    for name in ("gpu", "qat", "fpga"):
        if not registry.probe(name).available:
            return name
    pytest.skip("every accelerator backend is available here; no backend to make unavailable")


def test_unavailable_backend_on_a_worker_fails_the_job_with_its_reason(server, breast):
    name = _unavailable_backend()
    # last test of the module: the server stays up with this environment until the finaliser
    server.stop()
    server.start(worker_env={"UNIFL_BACKEND": name}, timeout=180)   # every task inherits it
    # no PSI: the arbiter's kit fails at key generation, before the data's alignment matters
    with pytest.raises(flow.FateFlowJobFailed) as info:
        flow.run_job(server, "breast_hetero", [flow.ModelSpec("lr", "unifl", epochs=1)],
                     psi=False, timeout=600)
    err = info.value
    assert err.job_id and err.task_errors, str(err)
    # the worker's config ({backend: name, fallback: []}) through the scheduler, with the reason
    assert any(f"no backend of the chain ['{name}'] could start ({name}:" in e
               and e.startswith("lr_unifl ") for e in err.task_errors), str(err)
