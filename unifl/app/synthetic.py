"""A synthetic vertical dataset for scale runs, shaped like default_credit, generated row by row.

Shape and separability (the defaults) follow FATE's default_credit as the parties hold it: the
guest 13 features and the label, the host 10 features, about 22% positives, and a plain logistic
regression on both parties' features reaching a held-out AUC of about 0.72 (default_credit: 0.725
on its seed-42 split; guest features alone 0.63 here, 0.66 there; host alone 0.69, 0.72 there).

**The model.**  Every row i has K = 4 latent factors z_i ~ N(0, I) that no party holds as a
column.  The guest's features load on z_0 and z_1, the host's on z_1, z_2 and z_3:

    x_ij = μ_j + σ_j · (a_j · z_i + s_j · e_ij),     e_ij ~ N(0, 1)
    P(y_i = 1) = σ(β_0 + β · z_i),                   β_0 = −1.5, β = (0.5, 0.25, 0.72, 0.3)

with loadings a_j, noise scales s_j, locations μ_j and scales σ_j drawn once from a fixed
structural seed (:data:`STRUCTURE_SEED`, not the job's), so every job has the same kind of data
and only the rows depend on the job's seed.  The label is y_i = 1[v_i < σ(β_0 + β·z_i)].

**Generation.**  Every random number is a counter-based hash of (seed, stream, row id)
(splitmix64, twice; normals by Box–Muller from two such uniforms), so any row can be generated on
its own, in any chunking, in any order: rows 0..N−1 generated in chunks of 7 or of 1000 are
bit-identical, and a party reads exactly the rows of a chunk without ever building the full
matrix.  (The hash is a generator for benchmarks, not a cryptographic PRF.)  Each party generates
only its own columns -- the guest ids, label and its features, the host ids and its features --
but both derive them from the same job seed: both compute the latent factors z_i, which is what
makes the host's features predictive of the guest's label.  That is acceptable for a synthetic
benchmark and for nothing else: a party that knows the seed can generate the other's data.

**Split.**  Row i is a test row iff its hash uniform u_i < ``test_fraction`` (streamed, no
permutation).  Train row k (k-th training row in id order) is found through the count of training
rows per block of :data:`BLOCK` ids (N / 4096 integers per party), then the block's hashes.

**Standardisation** is known from the generator's parameters, not fitted: feature j is
standardised with its population mean μ_j and standard deviation σ_j·sqrt(|a_j|² + s_j²), exactly,
in any chunking (no pass over the data; the sample mean of the train split differs from μ_j by
O(1/sqrt(N)), which is immaterial for a benchmark).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError
from .channel import Channel
from .params import SyntheticSpec

__all__ = ["SYNTHETIC", "SyntheticParty", "SyntheticSpec", "STRUCTURE_SEED", "BLOCK",
           "generate", "ids_digest", "spec_of", "check_alignment", "uniform", "normal"]

#: the dataset name a job gives to select this generator (with a ``synthetic:`` block)
SYNTHETIC = "synthetic"
#: seed of the dataset's structure (loadings, scales): fixed, so separability never depends on
#: the job's seed
STRUCTURE_SEED = 20_240_611
#: ids per block of the streamed train/test split's count table
BLOCK = 4096
#: latent factors, the label's coefficients on them and its intercept
LATENT = 4
BETA = np.array([0.5, 0.25, 0.72, 0.3])
BETA0 = -1.5

_MASK = (1 << 64) - 1
_STREAM_SPLIT, _STREAM_LABEL, _STREAM_LATENT = 1, 2, 16
_STREAM_NOISE = {"guest": 1 << 20, "host": 2 << 20}


# ------------------------------------------------------------------ counter-based randomness
def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping arithmetic): a bijection of 2^64 with full
    avalanche."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _mix_int(x: int) -> int:
    """:func:`_mix` of one Python int (mod 2^64)."""
    x &= _MASK
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _key(seed: int, stream: int) -> np.uint64:
    """The 64-bit key of (job seed, stream)."""
    return np.uint64(_mix_int(_mix_int(seed + 0x9E3779B97F4A7C15) ^ (stream * 0xD1B54A32D192ED03)))


def uniform(seed: int, stream: int, ids: np.ndarray) -> np.ndarray:
    """u(seed, stream, id) in (0, 1), float64 with 53 random bits, one per id (uint64)."""
    h = _mix(_mix(ids.astype(np.uint64) ^ _key(seed, stream)) + np.uint64(0x9E3779B97F4A7C15))
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53


def normal(seed: int, stream: int, ids: np.ndarray) -> np.ndarray:
    """N(0, 1) per id by Box–Muller from the uniforms of streams 2·stream and 2·stream + 1."""
    u1 = uniform(seed, 2 * stream, ids)
    u2 = uniform(seed, 2 * stream + 1, ids)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


# ------------------------------------------------------------------ structure
@dataclass(frozen=True)
class _Columns:
    """One party's feature structure: loadings (F, K), noise scales, locations, scales."""

    loadings: np.ndarray
    noise: np.ndarray
    loc: np.ndarray
    scale: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        return self.loc

    @property
    def std(self) -> np.ndarray:
        return self.scale * np.sqrt((self.loadings ** 2).sum(axis=1) + self.noise ** 2)


def _columns(role: str, count: int) -> _Columns:
    """The fixed structure of ``role``'s ``count`` features (independent of the job's seed, and of
    the other party's feature count)."""
    rng = np.random.default_rng([STRUCTURE_SEED, 0 if role == "guest" else 1])
    a = np.zeros((count, LATENT))
    if role == "guest":
        a[:, 0] = rng.uniform(0.3, 0.9, count)
        a[:, 1] = rng.uniform(0.0, 0.5, count)
    else:
        a[:, 2] = rng.uniform(0.4, 0.9, count)
        a[:, 3] = rng.uniform(0.0, 0.6, count)
        a[:, 1] = rng.uniform(0.0, 0.3, count)
    noise = rng.uniform(0.4, 1.0, count)
    loc = rng.normal(0.0, 3.0, count)
    scale = np.exp(rng.uniform(-1.0, 2.0, count))
    return _Columns(a, noise, loc, scale)


def generate(seed: int, role: str, ids: np.ndarray, spec: SyntheticSpec
             ) -> tuple[np.ndarray, np.ndarray | None]:
    """Raw (unstandardised) features of rows ``ids`` for ``role``, and the labels for the guest
    (None for the host): a pure function of (seed, role, id), so any chunking gives the same
    rows."""
    ids = np.asarray(ids, dtype=np.uint64)
    z = np.stack([normal(seed, _STREAM_LATENT + k, ids) for k in range(LATENT)], axis=1)
    count = spec.guest_features if role == "guest" else spec.host_features
    cols = _columns(role, count)
    base = _STREAM_NOISE[role]
    e = np.stack([normal(seed, base + j, ids) for j in range(count)], axis=1)
    X = cols.loc + cols.scale * (z @ cols.loadings.T + cols.noise * e)
    if role != "guest":
        return np.ascontiguousarray(X), None
    p = 1.0 / (1.0 + np.exp(-(BETA0 + z @ BETA)))
    y = (uniform(seed, _STREAM_LABEL, ids) < p).astype(np.float64)
    return np.ascontiguousarray(X), y


def ids_digest(rows: int) -> str:
    """SHA-256 of the ids "0" .. "rows−1" joined by newlines (the value
    :func:`unifl.app.alignment.ids_digest` gives for the list), computed in blocks without the
    list."""
    h = hashlib.sha256()
    for a in range(0, rows, 1 << 16):
        text = "\n".join(map(str, range(a, min(a + (1 << 16), rows))))
        h.update((("\n" if a else "") + text).encode())
    return h.hexdigest()


def spec_of(job: dict) -> SyntheticSpec:
    """The validated ``synthetic`` block of a job whose dataset is ``synthetic``.

    Raises:
        ConfigError: the job has no ``synthetic`` block (``validate_job`` refuses that already).
    """
    raw = job.get("synthetic")
    if raw is None:
        raise ConfigError("dataset 'synthetic' needs a 'synthetic:' block with rows: N")
    return raw if isinstance(raw, SyntheticSpec) else SyntheticSpec.model_validate(raw)


# ------------------------------------------------------------------ one party's rows
class SyntheticParty:
    """One party's rows of a synthetic job, read by train/test row index without materialising
    the dataset: train rows are the ids whose split uniform is >= ``test_fraction``, in id order,
    test rows the others; features standardised with the generator's known mean and standard
    deviation; the guest gets an intercept column (last, not penalised) when ``fit_intercept``.

    Implements :class:`unifl.app.data.RowSource`.
    """

    def __init__(self, spec: SyntheticSpec, role: str, seed: int, test_fraction: float,
                 fit_intercept: bool = False) -> None:
        if role not in ("guest", "host"):
            raise ConfigError(f"no synthetic data for role {role!r}")
        if not 0.0 <= test_fraction < 1.0:
            raise ConfigError(f"test_fraction must lie in [0, 1), got {test_fraction}")
        self.spec, self.role, self.seed = spec, role, int(seed)
        self.test_fraction = float(test_fraction)
        count = spec.guest_features if role == "guest" else spec.host_features
        cols = _columns(role, count)
        self._mean, self._std = cols.mean, cols.std
        self.intercept = role == "guest" and fit_intercept
        self.feature_names = [f"x{j}" for j in range(count)] + (["intercept"] if self.intercept
                                                               else [])
        self.l2_mask = np.ones(count + int(self.intercept))
        if self.intercept:
            self.l2_mask[-1] = 0.0
        self.source = f"synthetic(rows={spec.rows}, seed={seed})"
        # training rows per block of BLOCK ids: the only state that grows with the rows (1/4096)
        blocks = -(-spec.rows // BLOCK)
        train_per_block = np.empty(blocks, np.int64)
        for first in range(0, blocks, 64):             # 64 blocks (256 K hashes) at a time
            group = np.arange(first, min(first + 64, blocks))
            train_per_block[group] = self._train_mask(group).sum(axis=1)
        self._train_start = np.concatenate([[0], np.cumsum(train_per_block)])
        block_sizes = np.full(blocks, BLOCK, np.int64)
        if blocks:
            block_sizes[-1] = spec.rows - (blocks - 1) * BLOCK
        self._test_start = np.concatenate([[0], np.cumsum(block_sizes - train_per_block)])
        self.n_train = int(self._train_start[-1])
        self.n_test = int(self._test_start[-1])
        self.dim = count + int(self.intercept)

    def _train_mask(self, blocks: np.ndarray) -> np.ndarray:
        """(len(blocks), BLOCK) booleans: which ids of each block are training rows (ids past
        the last row are neither)."""
        ids = (blocks.astype(np.int64)[:, None] * BLOCK + np.arange(BLOCK)[None, :])
        valid = ids < self.spec.rows
        u = uniform(self.seed, _STREAM_SPLIT, ids.reshape(-1)).reshape(ids.shape)
        return valid & (u >= self.test_fraction)

    def _ids(self, rows: np.ndarray, test: bool) -> np.ndarray:
        """The ids of train (or test) rows ``rows`` (indices in id order within their split)."""
        rows = np.asarray(rows, dtype=np.int64)
        start = self._test_start if test else self._train_start
        total = int(start[-1])
        if rows.size and (rows.min() < 0 or rows.max() >= total):
            raise ConfigError(f"synthetic rows outside [0, {total}) of the "
                              f"{'test' if test else 'train'} split")
        blk = np.searchsorted(start, rows, side="right") - 1
        uniq, inv = np.unique(blk, return_inverse=True)
        mask = self._train_mask(uniq)
        if test:
            valid = (uniq[:, None] * BLOCK + np.arange(BLOCK)[None, :]) < self.spec.rows
            mask = valid & ~mask
        flat = np.flatnonzero(mask.reshape(-1))          # row r of mask: positions r·BLOCK + p
        first = np.concatenate([[0], np.cumsum(mask.sum(axis=1))])[:-1]
        pos = flat[first[inv] + (rows - start[blk])] - inv * BLOCK
        return blk * BLOCK + pos

    def _read(self, rows: np.ndarray, test: bool) -> tuple[np.ndarray, np.ndarray | None]:
        X, y = generate(self.seed, self.role, self._ids(rows, test), self.spec)
        X = (X - self._mean) / self._std
        if self.intercept:
            X = np.hstack([X, np.ones((len(X), 1))])
        return np.ascontiguousarray(X), y

    def train(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Standardised features (with the intercept) and labels (guest) of train rows ``rows``."""
        return self._read(rows, False)

    def test(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The same for test rows ``rows``."""
        return self._read(rows, True)

    def materialise(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(X_train, X_test, y_train, y_test) in full: for the tree jobs, whose binning needs the
        whole column (quantiles), and for tests -- never on the streamed vertical path."""
        X_tr, y_tr = self.train(np.arange(self.n_train))
        X_te, y_te = self.test(np.arange(self.n_test))
        return X_tr, X_te, y_tr, y_te


def check_alignment(role: str, peer: str, channel: Channel, rows: int) -> None:
    """The parties' id digests compared (as :func:`unifl.app.alignment.check_alignment` does for
    a list of ids), for the synthetic ids 0 .. rows−1, computed without the list.

    Raises:
        ConfigError: the digests differ (the parties run different ``synthetic.rows``).
    """
    own = ids_digest(rows)
    channel.send(peer, "vfl/ids_digest", own)
    if channel.recv(peer, "vfl/ids_digest") != own:
        raise ConfigError(f"{role}: the parties' synthetic ids differ ({role} has rows = {rows}): "
                          "both must run the same synthetic block")
