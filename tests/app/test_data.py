"""The party files as read (unifl.app.data.read_csv): every value exactly as Python's float parses
it, the ids as text, and malformed files refused with the reason."""

from __future__ import annotations

import csv
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unifl.app.data import BUNDLED, read_csv
from unifl.core.errors import ConfigError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def _reference(path: Path, with_label: bool):
    """The file read the plain way: the csv module, and float() per value."""
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    header, body = rows[0], rows[1:]
    values = [[float(v) for v in r[1:]] for r in body]
    return [r[0] for r in body], values, header


def _bits(a) -> list[int]:
    return [struct.unpack("<Q", struct.pack("<d", float(x)))[0] for x in np.ravel(a)]


@pytest.mark.parametrize("path", sorted(BUNDLED.glob("*.csv")) + sorted(SHARED.glob("*.csv")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_file_reads_bit_for_bit_as_float_parses_it(path):
    with_label = "guest" in path.name or "homo" in path.name
    got = read_csv(path, with_label)
    ids, values, header = _reference(path, with_label)
    first = 2 if with_label else 1
    assert got.ids == ids and got.feature_names == header[first:]
    assert _bits(got.X) == _bits([v[first - 1:] for v in values])
    if with_label:
        assert _bits(got.y) == _bits([v[0] for v in values])
    assert got.X.flags.c_contiguous and got.X.dtype == np.float64


finite = st.floats(allow_nan=False, allow_infinity=True, width=64)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(finite, min_size=3, max_size=3), min_size=1, max_size=30),
       st.sampled_from([repr, "{:.17g}".format, "{:.6e}".format, "{:.3f}".format, str]))
def test_any_spelling_of_a_double_reads_as_float_reads_it(tmp_path_factory, rows, spell):
    path = tmp_path_factory.mktemp("csv") / "p_guest.csv"
    lines = ["id,y,a,b"] + [",".join([f"r{i}"] + [spell(v) for v in r]) for i, r in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    got = read_csv(path, True)
    want = [[float(spell(v)) for v in r] for r in rows]
    assert got.ids == [f"r{i}" for i in range(len(rows))]
    assert _bits(got.y) == _bits([w[0] for w in want])
    assert _bits(got.X) == _bits([w[1:] for w in want])


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "x_guest.csv"
    path.write_text(text)
    return path


def test_quoted_fields_blank_lines_and_no_rows(tmp_path):
    got = read_csv(_write(tmp_path, 'id,y,a\n"7",1,"2.5"\n\n8,0,-1e3\n'), True)
    assert got.ids == ["7", "8"] and got.y.tolist() == [1.0, 0.0]
    assert got.X.tolist() == [[2.5], [-1000.0]]
    empty = read_csv(_write(tmp_path, "id,a,b\n"), False)
    assert empty.ids == [] and empty.X.shape == (0, 2)
    nan = read_csv(_write(tmp_path, "id,a\n1,nan\n2,-inf\n"), False)
    assert math.isnan(nan.X[0, 0]) and nan.X[1, 0] == -math.inf


@pytest.mark.parametrize("text,match", [
    ("", "empty file"),
    ("key,y,a\n1,0,2\n", "first column must be id/idx"),
    ("id,a,b\n1,2,3\n", "needs a label column"),
    ("id,y,a\n1,0,abc\n", "non-numeric value"),
    ("id,y,a\n1,0,#3\n", "non-numeric value"),
    ("id,y,a\n1,0\n", r"rows of \[2\] columns, the header has 3"),
    ("id,y,a\n1,0,2,9\n", r"rows of \[4\] columns"),
])
def test_malformed_files_are_refused_with_the_reason(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        read_csv(_write(tmp_path, text), True)
