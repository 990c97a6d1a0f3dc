"""Backends as plug-ins: a package outside unifl/, registered only through the ``unifl.backends``
entry point group of its distribution's metadata, is listed, configured from a party YAML by its own
options model, selected by the scheduler and bit-identical to cpu -- with no file under unifl/
naming it.  A plug-in that fails to import is unavailable with the reason; one that claims a
built-in's name is refused.  And options a backend does not know are refused, not ignored."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import unifl
from unifl import base_op
from unifl.configs import load_party
from unifl.core import registry
from unifl.core.errors import BackendUnavailable, ConfigError
from unifl.scheduler import MultiDeviceBackend, backend_from_config

from tests.helpers.keys import paillier_keypair, random_odd_modulus
from tests.helpers.paths import ROOT as REPO_ROOT

# The plug-in is a real package, examples/plugin_backend (docs/backends/README.md walks through it): MontMult
# on Python integers with one option of its own; every other op is composed by UniFL's layers from
# its MontMults.  The fixture installs it with pip, as its user would.
PLUGIN_PROJECT = REPO_ROOT / "examples" / "plugin_backend"

# A second distribution: a plug-in whose driver is missing, one whose class disagrees with its
# entry point name, and one that claims the name of a built-in backend.
BROKEN_SOURCE = 'raise ImportError("libacme_card.so: cannot open shared object file")\n'
EXTRAS_ENTRY_POINTS = """\
[unifl.backends]
acme_card = acme_card_backend:AcmeCardBackend
acme_misnamed = acme_unifl_backend:AcmeBackend
cpu = acme_unifl_backend:AcmeBackend
"""

UNIFL_DIR = Path(unifl.__file__).resolve().parent


def _dist(root: Path, name: str, entry_points: str) -> None:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture(scope="module")
def acme_install(tmp_path_factory):
    """examples/plugin_backend installed by pip into a folder of its own (built from a copy, so the
    source tree stays clean), as `pip install ./examples/plugin_backend` would leave it."""
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    shutil.copytree(PLUGIN_PROJECT, src)
    site = root / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--no-build-isolation", "--no-index", "--target", str(site), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (site / "acme_unifl_backend" / "__init__.py").is_file()
    return site


@pytest.fixture
def plugins(acme_install, tmp_path, monkeypatch):
    """The installed plug-in and a second distribution with broken entries, on sys.path."""
    (tmp_path / "acme_card_backend").mkdir()
    (tmp_path / "acme_card_backend" / "__init__.py").write_text(BROKEN_SOURCE)
    _dist(tmp_path, "acme_extras", EXTRAS_ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(acme_install))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.refresh_plugins()
    yield acme_install
    monkeypatch.undo()
    for mod in ("acme_unifl_backend", "acme_card_backend"):
        sys.modules.pop(mod, None)
    registry.refresh_plugins()


def _party_yaml(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "party.yaml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path.write_text("party: guest\nnetwork: {listen: '127.0.0.1:50052'}\n" + textwrap.dedent(body))
    return path


def test_plugin_is_listed_and_comes_from_outside_unifl(plugins):
    assert "acme" in registry.names() and "acme" in unifl.available_backends()
    cls = registry.backend_class("acme")
    assert Path(sys.modules[cls.__module__].__file__).resolve().is_relative_to(plugins)
    assert "acme" not in registry._BUILTIN         # not a folder of unifl/backends
    # nothing under unifl/ names the plug-in: the entry point alone registered it
    for path in UNIFL_DIR.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".yaml", ".toml", ".txt", ".json"):
            assert "acme" not in path.read_text(encoding="utf-8", errors="replace"), path


def test_party_yaml_selects_and_configures_the_plugin_bit_identical_to_cpu(plugins):
    cfg = load_party(_party_yaml(plugins, """\
        backend: acme
        fallback: [cpu]
        acme: {reduction: redc}
        """))
    assert cfg.backend_options("acme") == {"reduction": "redc"}
    be = backend_from_config(cfg)
    assert be.selection.chosen == "acme" and not be.selection.fallback_events
    assert be.inner.name == "acme" and be.inner.options.reduction == "redc"

    pk, sk = paillier_keypair(1024)
    cpu = unifl.backend("cpu")
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(3)]
    rs = [secrets.randbelow(pk.n - 1) + 1 for _ in ms]
    c_plugin = pk.raw_encrypt(ms, backend=be, r_values=rs)
    assert c_plugin == pk.raw_encrypt(ms, backend=cpu, r_values=rs)
    assert sk.raw_decrypt(c_plugin, backend=be) == ms == sk.raw_decrypt(c_plugin, backend=cpu)
    # the work ran on the plug-in: its MontMults, counted under its name
    assert {r["backend"] for r in be.report()} == {"acme"}
    assert any(r["op"] == "mont_mul" and r["elements"] > 0 for r in be.report())


def test_both_reductions_and_two_plugin_instances_split_a_batch(plugins):
    # mapping entries of devices: configure one instance each, with the plug-in's own option
    cfg = load_party(_party_yaml(plugins, """\
        backend: acme
        fallback: [cpu]
        devices: [{reduction: inverse}, {reduction: redc}]
        """))
    be = backend_from_config(cfg)
    assert isinstance(be, MultiDeviceBackend)
    assert sorted(m.inner.options.reduction for m in be.members) == ["inverse", "redc"]
    ctx = base_op.mont_context(random_odd_modulus(1024))
    a = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(40)])
    b = ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(40)])
    want = base_op.mont_mul(unifl.backend("cpu"), ctx, a, b)
    assert np.array_equal(base_op.mont_mul(be, ctx, a, b), want)
    for reduction in ("inverse", "redc"):
        alone = unifl.backend("acme", reduction=reduction)
        assert np.array_equal(base_op.mont_mul(alone, ctx, a, b), want)
    be.close()


@pytest.mark.parametrize("section,field,words", [
    ("acme: {reduction: redc, lanes: 4}", "acme.lanes", "unknown field (backend 'acme' takes: reduction)"),
    ("acme: {reduction: fast}", "acme.reduction", "must be 'inverse' or 'redc'"),
    ("devices: [{reduction: 3}]", "devices.0.reduction", "must be 'inverse' or 'redc'"),
    ("devices: [1, 2]", "devices.0", "no device selector"),
])
def test_plugin_section_is_checked_by_its_model(plugins, section, field, words):
    path = _party_yaml(plugins, f"backend: acme\n{section}\n")
    with pytest.raises(ConfigError) as err:
        load_party(path)
    assert f"field '{field}'" in str(err.value) and words in str(err.value), str(err.value)
    with pytest.raises(ConfigError, match="option 'lanes': unknown option"):
        unifl.backend("acme", lanes=4)


def test_broken_plugin_is_unavailable_with_the_reason_and_skipped(plugins):
    assert "acme_card" in registry.names() and "acme_card" not in unifl.available_backends()
    reason = registry.probe("acme_card").reason
    assert "cannot be imported" in reason and "libacme_card.so" in reason
    with pytest.raises(BackendUnavailable, match="libacme_card.so"):
        unifl.backend("acme_card")
    # a config naming it still loads (its section cannot be checked here) and falls back
    be = backend_from_config(load_party(_party_yaml(plugins, """\
        backend: acme_card
        fallback: [cpu]
        acme_card: {anything: 1}
        """)))
    assert be.selection.chosen == "cpu"
    assert "libacme_card.so" in be.selection.fallback_events[0]["reason"]
    # a class whose name disagrees with its entry point is not taken either
    assert "must agree" in registry.probe("acme_misnamed").reason


def test_plugin_cannot_take_a_builtin_name(plugins):
    assert "cpu" in registry.refused() and "built-in" in registry.refused()["cpu"]
    assert registry.backend_class("cpu").__module__ == "unifl.backends.cpu"
    assert unifl.backend("cpu").name == "cpu"


def test_plugins_go_away_with_their_distribution(plugins, monkeypatch):
    monkeypatch.undo()                  # the distributions leave sys.path
    registry.refresh_plugins()
    assert "acme" not in registry.names() and not registry.refused()
    with pytest.raises(BackendUnavailable, match="unknown backend 'acme'"):
        unifl.backend("acme")


def test_options_a_backend_does_not_know_are_refused_not_ignored():
    # the gpu backend drives every visible CUDA device in one instance: a device list is no
    # option of it, and is refused by name even where no GPU is present
    with pytest.raises(ConfigError, match="option 'devices': unknown option"):
        unifl.backend("gpu", devices=[0])
    for name in registry.names():
        try:
            registry.options_model(name)
        except BackendUnavailable:
            continue
        with pytest.raises(ConfigError, match="option 'no_such_option_x'"):
            unifl.backend(name, no_such_option_x=1)
