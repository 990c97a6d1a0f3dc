"""The short version of ``make fuzz``: every coverage-guided fuzz harness under ``fuzz/`` runs for
at least 2,000 inputs (atheris/libFuzzer, in a subprocess with a per-input time limit and an RSS
limit) and must end with 0 crashes: no exception other than UniFL's typed errors, no hang, no memory
blow-up.  Plus the inputs that crashed a parser while fuzzing, replayed as plain regression tests
(these need no atheris), and a check that the runner does report a crashing harness.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from unifl.app import codec
from unifl.app.params import load_job
from unifl.configs import load_party
from unifl.core.errors import ConfigError, SerializationError
from unifl.phe_sdk import serialize
from tests.helpers.paths import ROOT as REPO_ROOT

ROOT = REPO_ROOT
SHORT_RUNS = 2000
HARNESSES = ("codec", "envelope", "frame", "key_json", "yaml_config")


@functools.lru_cache(maxsize=None)
def _runner():
    """fuzz/run.py (not a package: loaded by path; registered so its dataclass resolves)."""
    spec = importlib.util.spec_from_file_location("unifl_fuzz_run", ROOT / "fuzz" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _need_atheris() -> None:
    pytest.importorskip("atheris", reason="atheris (requirements.txt) is not installed: "
                                          "the fuzz harnesses cannot run")


def test_every_harness_is_listed() -> None:
    assert tuple(_runner().HARNESSES) == HARNESSES


@pytest.mark.parametrize("name", HARNESSES)
def test_harness_short_run_has_no_crash(name: str) -> None:
    _need_atheris()
    r = _runner().run_harness(name, SHORT_RUNS, timeout_s=120)
    assert r.failure is None, f"fuzz_{name}: {r.failure}\n{r.output[-4000:]}"
    assert r.runs >= SHORT_RUNS


def test_runner_reports_a_crash(tmp_path: Path) -> None:
    """A harness that raises a non-UniFL exception must fail the run (the check can fail)."""
    _need_atheris()
    script = tmp_path / "fuzz_broken.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "fuzz")!r})
        import atheris
        with atheris.instrument_imports(include=["unifl"]):
            import _common

        def test_one(data: bytes) -> None:
            raise ValueError("planted crash")

        _common.main(test_one, lambda: [b"seed"])
    """))
    r = _runner().run_harness("broken", 100, timeout_s=120, script=script,
                              extra=(f"-artifact_prefix={tmp_path}/",))
    assert r.failure is not None and "planted crash" in r.output
    assert list(tmp_path.glob("crash-*")), "the crashing input was not written for replay"


# ---- regressions: inputs that crashed a parser while fuzzing (now typed errors) ---------------
def test_codec_zero_size_array_with_impossible_shape() -> None:
    # 'A' (float64), ndim 10, shape (0x5c, 0, 0x5d, ...): numpy's reshape raised ValueError
    msg = bytes.fromhex("55464c4d01410a02") + bytes(7) + b"\x5c" + bytes(20) + b"\x5d" + bytes(47) \
        + b"\x03" + bytes(7)
    with pytest.raises(SerializationError):
        codec.decode(msg)
    ok = codec.encode(np.zeros((0, 3)))               # a real zero-size array still decodes
    assert codec.decode(ok).shape == (0, 3)


def test_key_json_deep_nesting() -> None:
    with pytest.raises(SerializationError):
        serialize.key_from_json(b'{"unifl": 1, "kind": ' + b"[" * 1100)


def _bomb() -> bytes:
    text = b"a: &a [x,x,x,x,x,x,x,x,x,x]\n"
    for c in b"bcdefghij":
        text += b"%c: &%c [%s]\n" % (c, c, b",".join([b"*%c" % (c - 1)] * 10))
    return text


@pytest.mark.parametrize("text", [
    b"party: guest\nbackend: \xff\xfe\n",            # not UTF-8: UnicodeDecodeError
    b"party: " + b"[" * 1500,                        # nesting: RecursionError
    b"key_bits: " + b"9" * 4400 + b"\n",             # int past 4300 digits: ValueError
    b"party: 2001-13-45\n",                          # bad date: ValueError
    b"party: &a [*a]\n",                             # recursive alias
    _bomb(),                                         # 10^9 nodes from aliases: a hang
    b"party: guest\nkey_bits: !!int #2048'\n",       # tagged empty int: PyYAML's IndexError
    b"key_bits: !!float nope\n",                     # tagged non-float: ValueError
], ids=["utf8", "deep", "bigint", "date", "recursive", "alias-bomb", "empty-int", "bad-float"])
def test_yaml_loaders_refuse_hostile_files(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    for loader in (load_party, load_job):
        with pytest.raises(ConfigError):
            loader(path)


def test_yaml_loaders_still_accept_aliases(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps({"job_id": "j", "algorithm": "vlr"}) + "\n")
    assert load_job(path).job_id == "j"
    path.write_text("job_id: j\nalgorithm: vlr\nparams: {epochs: &x 3, max_rows: *x}\n")
    assert load_job(path).params.max_rows == 3
