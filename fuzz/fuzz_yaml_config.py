"""Fuzz the YAML config loaders ``unifl.configs.load.load_party`` and ``unifl.app.params.load_job`` (user input: a
party's hardware/network file and the job file, possibly received from another site).

Input layout: one mode byte (bit 0: 0 = party config, 1 = job config), then the file's bytes (not
necessarily UTF-8).  Each input is written to a file in a private temporary directory and loaded
through the public path-based loader, so reading, YAML parsing and schema validation are all
exercised.  PyYAML is pure Python here (about 2 ms per KB), so inputs are capped at 2 KB
(``-max_len=2048``) and PyYAML itself is not instrumented (coverage feedback comes from UniFL's
code), to keep 10^5 inputs within minutes.  Seeds: every shipped example YAML under
``unifl/configs`` under both modes, the same without comments, a few YAML features
(anchors/aliases, merge keys, tags, flow collections) and the inputs that crashed the loaders.
Expected outcomes: a validated config, or ConfigError (YAML syntax errors included).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import atheris
import yaml

with atheris.instrument_imports(include=["unifl"]):  # coverage feedback from UniFL
    import _common
    from unifl.app import params as job_params
    from unifl.configs import load

# $TMPDIR: fuzz/run.py points it into the run's temporary directory, removed after the run
PATH = Path(tempfile.mkdtemp(prefix="unifl-fuzz-yaml-"), "config.yaml")

EXTRA_SEEDS = [
    b"party: guest\nnetwork: &n {listen: '127.0.0.1:1', peers: {host: 'h:2'}}\n",
    b"base: &b {party: host}\n<<: *b\nbackend: cpu\n",
    b"party: !!str guest\nkey_bits: !!int '2048'\ndevices: [0, {backend: cpu}, '1']\n",
    b"job_id: j\nalgorithm: vlr\nparams: {a: &x [1, 2, 3], b: *x, c: 0x1f, d: 1_000, e: .inf}\n",
    b"job_id: j\nalgorithm: psi\nparties: [guest, host, arbiter]\nseed: -1\n",
    b"- a\n- [b, {c: d}]\n",
    # regressions (crashes found while fuzzing, fixed in unifl/configs/load.py)
    b"party: guest\nbackend: \xff\xfe\n",                        # not UTF-8
    b"party: " + b"[" * 1500,                                       # nesting past recursion limit
    b"key_bits: " + b"9" * 1900 + b"1" * 2500 + b"\n",   # int past 4300 digits (past max_len:
                                                            # libFuzzer truncates it; kept as a hint)
    b"party: 2001-13-45\n",                                        # date the constructor refuses
    b"party: &a [*a]\n",                                            # recursive alias
    b"a: &a [x,x,x,x,x,x,x,x,x,x]\n" + b"".join(                   # alias bomb ("billion laughs")
        b"%c: &%c [%s]\n" % (c, c, b",".join([b"*%c" % (c - 1)] * 10)) for c in b"bcdefghij"),
]


def test_one(data: bytes) -> None:
    if not data:
        return
    PATH.write_bytes(data[1:])
    loader = job_params.load_job if data[0] & 1 else load.load_party
    try:
        loader(PATH)
    except _common.EXPECTED:
        return


def seeds() -> list[bytes]:
    files = sorted(Path(load.EXAMPLES_DIR).glob("*.yaml"))
    texts = [f.read_bytes() for f in files] + EXTRA_SEEDS
    # the examples without their comments: short seeds keep each input fast (pure-Python YAML)
    texts += [yaml.safe_dump(yaml.safe_load(f.read_text()), default_flow_style=True).encode()
              for f in files]
    return [bytes([mode]) + t for t in texts for mode in (0, 1)]


if __name__ == "__main__":
    _common.main(test_one, seeds, default_flags=["-max_len=2048"])
