"""The example datasets (FATE's CSVs) as each party sees them, plus the deterministic preprocessing
both parties must agree on: row alignment by sorted id, train/test split by seed, standardisation.

Vertical ("hetero") sets: the guest file has ``id, y, x...``, the host file ``id, x...`` (motor uses
``idx`` and the continuous label ``motor_speed``).  Horizontal ("homo") sets: every file has
``id, y, x...``.

Where the files come from: ``data_dir`` if given, else ``$UNIFL_DATA_DIR``, else the workspace's
``../shared/data`` when present, else the copies bundled in ``unifl/app/data`` (default_credit is
bundled as a 1,000-row sample; see its SOURCES.md).
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np

from ..core.errors import ConfigError

BUNDLED = Path(__file__).with_name("data")
_LABELS = {"y", "motor_speed"}
_IDS = {"id", "idx"}
TASKS = {"breast": "binary", "default_credit": "binary", "motor": "regression",
         "synthetic": "binary"}


class RowSource(Protocol):
    """One party's aligned, split and standardised rows of a vertical job, read by row index, so
    the trainers can stream them chunk by chunk: from matrices in memory (the CSV datasets,
    ``unifl.app.vertical.PartyMatrices``) or generated on demand
    (:class:`unifl.app.synthetic.SyntheticParty`, which never builds the full matrix).

    ``train(rows)`` / ``test(rows)`` give the features (float64, C-contiguous, one row per index,
    the guest's intercept column included) and the labels (the guest) or None (the host) of the
    rows at those indices of the train / test split."""

    @property
    def n_train(self) -> int: ...

    @property
    def n_test(self) -> int: ...

    @property
    def dim(self) -> int: ...

    feature_names: list[str]
    l2_mask: np.ndarray
    source: str

    def train(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]: ...

    def test(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]: ...


@dataclass
class PartyData:
    """One party's rows: ids (strings), features X (float64, rows x features), label y or None."""

    ids: list[str]
    X: np.ndarray
    y: np.ndarray | None
    feature_names: list[str]
    source: str = ""
    extra: dict = field(default_factory=dict)

    def select(self, ids: list[str]) -> "PartyData":
        """Rows in the order of ``ids`` (all must be present)."""
        pos = {k: i for i, k in enumerate(self.ids)}
        try:
            rows = np.array([pos[k] for k in ids], dtype=np.int64)
        except KeyError as exc:
            raise ConfigError(f"id {exc.args[0]!r} is not in this party's data") from exc
        return PartyData(list(ids), self.X[rows], None if self.y is None else self.y[rows],
                         self.feature_names, self.source, dict(self.extra))


def _candidates(data_dir: str | None) -> list[Path]:
    out = []
    if data_dir:
        out.append(Path(data_dir))
    env = os.environ.get("UNIFL_DATA_DIR")
    if env:
        out.append(Path(env))
    out.append(Path(__file__).resolve().parents[3] / "shared" / "data")
    out.append(Path.cwd().parent / "shared" / "data")
    out.append(BUNDLED)
    return out


def find_file(name: str, data_dir: str | None = None) -> Path:
    """The first existing ``name`` among the data locations; the bundled sample for default_credit."""
    for folder in _candidates(data_dir):
        p = folder / name
        if p.is_file():
            return p
    if name.startswith("default_credit_hetero_"):
        p = BUNDLED / name.replace("default_credit_hetero_", "default_credit_sample_hetero_")
        if p.is_file():
            return p
    if data_dir:
        raise ConfigError(f"dataset file {name} not found in {data_dir} (nor bundled)")
    raise ConfigError(f"dataset file {name} not found (looked in {[str(c) for c in _candidates(None)]})")


def read_csv(path: Path, with_label: bool) -> PartyData:
    """Parse a FATE example CSV (id column first, optional label, then features): the ids as text,
    every other column as float64, each value exactly as Python's ``float`` parses it.

    The numbers go through NumPy's ``loadtxt`` (C), the ids and row widths through the csv module:
    ``float`` per value took 0.20 s of default_credit's guest file here, ahead of every party's
    job, and this takes 0.11 s."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")            # read once: the csv module and loadtxt share it
    ids: list[str] = []
    widths: set[int] = set()
    reader = csv.reader(lines)
    header = next(reader, None)
    for r in reader:
        if r:
            ids.append(r[0])
            widths.add(len(r))
    if not header:
        raise ConfigError(f"{path}: empty file")
    if header[0] not in _IDS:
        raise ConfigError(f"{path}: first column must be id/idx, got {header[0]!r}")
    label_col = 1 if with_label and len(header) > 1 and header[1] in _LABELS else None
    if with_label and label_col is None:
        raise ConfigError(f"{path}: the guest file needs a label column (y or motor_speed) second")
    if widths - {len(header)}:
        raise ConfigError(f"{path}: rows of {sorted(widths - {len(header)})} columns, the header "
                          f"has {len(header)}")
    first_feature = 2 if label_col is not None else 1
    if not ids or len(header) == 1:
        data = np.zeros((len(ids), len(header) - 1))
    else:
        try:
            data = np.loadtxt(lines[1:], delimiter=",", usecols=range(1, len(header)),
                              dtype=np.float64, ndmin=2, comments=None, quotechar='"')
        except ValueError as exc:
            raise ConfigError(f"{path}: non-numeric value ({exc})") from exc
    y = data[:, 0].copy() if label_col is not None else None
    X = np.ascontiguousarray(data[:, first_feature - 1:])
    return PartyData(ids, X, y, header[first_feature:], str(path))


def load_party(dataset: str, role: str, data_dir: str | None = None, kind: str = "hetero"
               ) -> PartyData:
    """This party's file of ``dataset`` ("breast", "motor", "default_credit", or a path prefix P with
    files P_guest.csv / P_host.csv).  ``kind`` "hetero" (vertical) or "homo" (horizontal; role
    "test" gives the held-out file)."""
    if role not in ("guest", "host", "test"):
        raise ConfigError(f"no data for role {role!r}")
    if os.sep in dataset or dataset.endswith(".csv"):
        path = Path(f"{dataset}_{role}.csv")
        if not path.is_file():
            raise ConfigError(f"dataset file {path} not found")
    else:
        if dataset == "synthetic":
            raise ConfigError("dataset 'synthetic' has no files: its rows are generated chunk by "
                              "chunk (unifl.app.synthetic.SyntheticParty)")
        if dataset not in TASKS:
            raise ConfigError(f"dataset {dataset!r} is not one of {sorted(TASKS)} (or a path)")
        path = find_file(f"{dataset}_{kind}_{role}.csv", data_dir)
    return read_csv(path, with_label=(kind == "homo" or role == "guest"))


def sorted_ids(ids: Iterable[str]) -> list[str]:
    """The canonical order both parties use for a set of ids: numeric when all ids are integers,
    else lexicographic (ids are compared as strings either way)."""
    ids = list(ids)
    if all(i.lstrip("-").isdigit() for i in ids):
        return sorted(ids, key=lambda s: (int(s), s))
    return sorted(ids)


def subsample_ids(ids: list[str], max_rows: int | None, seed: int) -> list[str]:
    """At most ``max_rows`` of the (canonically ordered) ids, chosen by ``seed``; order kept."""
    if not max_rows or max_rows >= len(ids):
        return ids
    keep = np.sort(np.random.default_rng(seed + 7919).choice(len(ids), max_rows, replace=False))
    return [ids[i] for i in keep]


def train_test_split(n: int, seed: int, test_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, test), both sorted, from a seeded permutation -- identical on every party."""
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"test_fraction must lie in [0, 1), got {test_fraction}")
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def standardize(X_train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """(X − mean)/std with mean and std fitted on ``X_train`` (constant columns left centred)."""
    mean = X_train.mean(axis=0)
    std = X_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return [(X - mean) / std for X in (X_train, *others)]
