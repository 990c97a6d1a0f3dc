"""What a federated job runs: one parameter model per algorithm, and the job file that names one.

There is exactly one definition of every hyper-parameter and its default, here.  The job YAML
(:func:`load_job`), the programmatic entry points (:func:`validate_job`,
``unifl.app.jobs.run_job``) and the algorithms themselves (``XParams.from_job``) all validate with
these models, so a job means the same thing however it is started.

Every model forbids unknown fields and coerces nothing (``strict``: ``epochs: "3"`` or
``fit_intercept: 1`` is an error, not a guess), and every error is a
:class:`~unifl.core.errors.ConfigError` naming the field and what is allowed.

| algorithm | model |
|---|---|
| ``psi`` | :class:`PsiParams` |
| ``vlr``, ``vlinr`` | :class:`VerticalParams` |
| ``psi+vlr``, ``psi+vlinr`` | :class:`PsiVerticalParams` (both sets of fields) |
| ``hlr`` | :class:`HorizontalParams` |
| ``secureboost`` | :class:`BoostParams` |

Fixed-point scale: the algorithms that encode reals take ``scale_bits`` (values travel as
round(x·2^scale_bits)); each keeps the scale it has always used as its default (vertical 24,
horizontal 40, SecureBoost's quantised gradients 24).  A party's ``encoding.scale_bits`` replaces
that default (:func:`with_party_scale`), and the parties compare their scales at job start
(:func:`check_peer_scale`): the scale is part of the protocol.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Mapping, Optional, TypeVar

from pydantic import (AliasChoices, BaseModel, ConfigDict, Field, SerializeAsAny, ValidationInfo,
                      field_validator, model_validator)

from ..configs.load import read_yaml, validate
from ..core.errors import ConfigError, ProtocolViolation
from ..phe_sdk.encoding import MAX_SCALE_BITS

Role = Literal["guest", "host", "arbiter"]
Algorithm = Literal["psi", "vlr", "vlinr", "psi+vlr", "psi+vlinr", "hlr", "secureboost"]
ALGORITHMS: tuple[str, ...] = ("psi", "vlr", "vlinr", "psi+vlr", "psi+vlinr", "hlr", "secureboost")
DATASETS: tuple[str, ...] = ("breast", "motor", "default_credit", "synthetic")
#: the algorithms that run on the synthetic dataset (vertical, aligned by construction, binary)
SYNTHETIC_ALGORITHMS: tuple[str, ...] = ("vlr", "secureboost")
#: the chunk size of the streamed algorithms: rows per encrypted message and per homomorphic step
DEFAULT_CHUNK_ROWS = 8192
#: the largest chunk: 2^16 ciphertexts of a 4096-bit key (1 KiB each) fill a 64 MiB message
MAX_CHUNK_ROWS = 1 << 16

P = TypeVar("P", bound="AlgorithmParams")
_TWO_PARTIES: tuple[Role, Role] = ("guest", "host")


class AlgorithmParams(BaseModel):
    """Base of the per-algorithm models: unknown fields forbidden, no coercion, no infinities or
    NaN, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    @classmethod
    def from_job(cls: type[P], params: Mapping[str, Any] | None) -> P:
        """The validated parameters from a job's ``params`` mapping (missing fields take the
        model's defaults).

        Raises:
            ConfigError: an unknown field or a bad value, naming the field and the bound.
        """
        if params is not None and not isinstance(params, Mapping):
            raise ConfigError(f"job params: expected a mapping, got {type(params).__name__}")
        return validate(cls, dict(params or {}), "job params")


class IdCounts(AlgorithmParams):
    """The most ids each party of a PSI may enter (its own set's size, or a bound on it)."""

    guest: int = Field(ge=1)
    host: int = Field(ge=1)


class PsiParams(AlgorithmParams):
    """RSA blind-signature PSI (:mod:`unifl.app.psi`)."""

    #: each party first drops this seeded share of its ids, so that a demo intersection is a real
    #: one (0: keep every id)
    drop_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    #: the host's RSA modulus size, and the guest's floor for it; None: the job's key_bits
    rsa_bits: Optional[int] = Field(None, ge=1024, le=8192)
    #: declared, each party refuses a peer that enters more ids than this (the host's digests,
    #: the guest's blinded values): a host could otherwise pad its set with ids it does not hold
    #: and learn whether the guest has them; None: bounded only by psi.MAX_PEER_IDS (a warning)
    max_ids: Optional[IdCounts] = None

    def rsa_key_bits(self, key_bits: int) -> int:
        """The RSA modulus size this job runs: ``rsa_bits``, else the job's ``key_bits``."""
        return int(self.rsa_bits if self.rsa_bits is not None else key_bits)


class FeatureCounts(AlgorithmParams):
    """The data columns each party of a vertical job holds (the guest's intercept not counted)."""

    guest: int = Field(ge=1)
    host: int = Field(ge=1)


class VerticalParams(AlgorithmParams):
    """Vertical LR / LinR (:mod:`unifl.app.vertical`), with or without an arbiter."""

    epochs: int = Field(10, ge=0)
    #: rows per mini-batch; <= 0: one full batch.  Every batch must have more rows than either
    #: party's feature count (checked at job start, once both counts are known)
    batch_size: int = 64
    learning_rate: float = Field(0.15, gt=0.0)
    l2: float = Field(0.0, ge=0.0)
    #: early stop when an epoch changes the weights by less than this (L2 norm); None: never
    tol: Optional[float] = Field(1e-4, ge=0.0)
    fit_intercept: bool = True
    test_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    #: a deterministic (seeded) subsample of the aligned rows; None: all
    max_rows: Optional[int] = Field(None, ge=1)
    #: DJN fixed-base encryption for the per-row encryptions: faster, rests on DJN's
    #: short-exponent assumption; a named option, off by default
    fixed_base: bool = False
    checkpoint_dir: Optional[str] = None
    #: continue from the checkpoints in checkpoint_dir (the latest epoch both parties saved)
    resume: bool = False
    #: declared, a peer's feature count is checked against the job instead of taken from the
    #: peer (the count sets how many values a key owner decrypts for that peer per batch)
    features: Optional[FeatureCounts] = None
    #: fixed-point scale of the encrypted partial predictions and residuals
    scale_bits: int = Field(24, ge=1, le=MAX_SCALE_BITS)
    #: rows per streamed chunk: a batch's [[z_h]], [[u]], [[d']] travel and enter Xᵀ[[d']] in
    #: chunks of this many rows (a party never holds more ciphertexts of a batch); both parties
    #: must run the same (compared at job start)
    chunk_rows: int = Field(DEFAULT_CHUNK_ROWS, ge=1, le=MAX_CHUNK_ROWS)
    #: the largest |share| of the residual d' a party contributes per row (the guest's
    #: u = z_g − 2y± or z_g − y, the host's z_h): each party refuses a decrypted gradient whose
    #: peer part Xᵀ(share) has a coordinate beyond bound·Σ_i|X_ij|, and checks its own share
    #: before sending it; both parties must run the same (compared at job start).  Honest shares
    #: on the shipped datasets stay below 5; None switches the check off
    residual_bound: Optional[float] = Field(64.0, gt=0.0)
    #: overlap with the peer (:mod:`unifl.app.overlap`): each party encrypts its next chunk before
    #: waiting for the peer's, sends in the background and computes the obfuscators of its next
    #: encryptions while it waits.  Each party applies it to its own side (the parties need not
    #: agree); the messages and the model are the same either way
    overlap: bool = True

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        if isinstance(data, dict) and "mask_bits" in data:
            raise ValueError("mask_bits is not a parameter any more: every mask is uniform mod "
                             "n (perfectly hiding, no size to choose); remove it from the job")
        return data

    def announced_dim(self, role: str) -> int | None:
        """The gradient dimension ``role`` must announce at job start (its declared features, plus
        the guest's intercept column), or None when the job declares no feature counts."""
        if self.features is None:
            return None
        count = self.features.guest if role == "guest" else self.features.host
        return count + (1 if role == "guest" and self.fit_intercept else 0)


class PsiVerticalParams(VerticalParams, PsiParams):
    """``psi+vlr`` / ``psi+vlinr``: PSI on the ids, then vertical training on the intersection;
    the fields of both."""


class HorizontalParams(AlgorithmParams):
    """Horizontal LR, FedAvg with an aggregator (:mod:`unifl.app.horizontal`)."""

    model_config = ConfigDict(populate_by_name=True)

    #: FedAvg rounds; ``epochs`` is accepted as its name too (the common word in job files)
    rounds: int = Field(5, ge=0, validation_alias=AliasChoices("rounds", "epochs"))
    local_epochs: int = Field(1, ge=1)
    batch_size: int = 32
    learning_rate: float = Field(0.1, gt=0.0)
    l2: float = Field(0.0, ge=0.0)
    #: fixed-point scale of the encrypted sample-weighted models
    scale_bits: int = Field(40, ge=1, le=MAX_SCALE_BITS)

    @model_validator(mode="before")
    @classmethod
    def _one_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "rounds" in data and "epochs" in data:
            raise ValueError("give rounds or its other name epochs, not both")
        return data


class BoostParams(AlgorithmParams):
    """Hetero SecureBoost (:mod:`unifl.app.secureboost`) and its plaintext reference."""

    n_trees: int = Field(5, ge=1)
    max_depth: int = Field(3, ge=1, le=16)
    learning_rate: float = Field(0.5, gt=0.0)
    #: L2 regularisation of the leaf weights, λ in w = −G/(H + λ)
    reg_lambda: float = Field(1.0, ge=0.0)
    #: the least hessian sum a child of a split may have
    min_child_weight: float = Field(1.0, ge=0.0)
    #: a split is made only when its gain exceeds gamma
    gamma: float = Field(0.0, ge=0.0)
    num_bins: int = Field(16, ge=2, le=1024)
    test_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    max_rows: Optional[int] = Field(None, ge=1)
    #: gradients and hessians are quantised to integers round(g·2^scale_bits); a node's sums must
    #: stay below 2^63 (checked against the row count at job start)
    scale_bits: int = Field(24, ge=1, le=60)
    #: rows per streamed chunk of the guest's [[ĝ + 2^64 ĥ]] (sent per level, folded into the
    #: host's histograms chunk by chunk); both parties must run the same (compared at job start)
    chunk_rows: int = Field(DEFAULT_CHUNK_ROWS, ge=1, le=MAX_CHUNK_ROWS)
    #: the guest keeps a tree's [[ĝ + 2^64 ĥ]] of every row for the tree's later levels while they
    #: take at most this many MiB (one encryption per row and tree); beyond it, each level's rows
    #: are encrypted afresh chunk by chunk (memory flat in the rows, about twice the encryptions
    #: at depth 3).  0: never keep them.  The guest's own choice: the host sees the same stream.
    gh_cache_mb: float = Field(256.0, ge=0.0)


class SyntheticSpec(BaseModel):
    """The ``synthetic:`` block of a job whose dataset is ``synthetic``
    (:mod:`unifl.app.synthetic`: rows generated chunk by chunk from the job's seed)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    #: rows of the dataset (train and test together; the split is per row id)
    rows: int = Field(ge=2, le=1 << 40)
    #: feature columns of each party (default_credit's shape: 13 and 10)
    guest_features: int = Field(13, ge=1, le=4096)
    host_features: int = Field(10, ge=1, le=4096)


#: the parameter model of each algorithm
PARAMS: dict[str, type[AlgorithmParams]] = {
    "psi": PsiParams, "vlr": VerticalParams, "vlinr": VerticalParams,
    "psi+vlr": PsiVerticalParams, "psi+vlinr": PsiVerticalParams,
    "hlr": HorizontalParams, "secureboost": BoostParams,
}


def params_model(algorithm: str) -> type[AlgorithmParams]:
    """The parameter model of ``algorithm``; ConfigError naming the allowed ones otherwise."""
    try:
        return PARAMS[algorithm]
    except (KeyError, TypeError):
        raise ConfigError(f"job field 'algorithm': {algorithm!r} is not one of "
                          f"{list(ALGORITHMS)}") from None


def params_of(job: Mapping[str, Any]) -> AlgorithmParams:
    """The validated parameters of a job dict (its algorithm's model)."""
    return params_model(job["algorithm"]).from_job(job.get("params"))


class JobConfig(BaseModel):
    """A job: what every party runs (a job YAML, or the dict given to ``run_job``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    #: every message carries it; a party refuses another job's messages
    job_id: str = Field("job", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    algorithm: Algorithm
    #: breast | motor | default_credit | synthetic (with a ``synthetic:`` block), or a path
    #: prefix P with P_guest.csv / P_host.csv
    dataset: str = "breast"
    #: guest and host, and the arbiter where the algorithm has one (any order; kept canonical)
    parties: list[Role] = Field(default_factory=lambda: list(_TWO_PARTIES))
    #: data split, subsample and mini-batch order (keys always come from the OS CSPRNG)
    seed: int = 42
    #: Paillier / RSA modulus bits
    key_bits: int = Field(2048, ge=1024, le=8192)
    #: the algorithm's parameters (its model from PARAMS; validated with the algorithm known)
    params: SerializeAsAny[AlgorithmParams] = Field(default_factory=dict, validate_default=True)
    #: the job continues after a party restarted: its peers accept the restarted party's new
    #: session; otherwise a second session from a party is refused (no replay into a new run)
    resume: bool = False
    #: the generator's settings when ``dataset`` is ``synthetic`` (required then, refused
    #: otherwise)
    synthetic: Optional[SyntheticSpec] = None

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: str) -> str:
        if v not in DATASETS and os.sep not in v and "/" not in v and not v.endswith(".csv"):
            raise ValueError(f"unknown dataset {v!r}; allowed: {', '.join(DATASETS)} or a path "
                             "prefix (P with P_guest.csv and P_host.csv)")
        return v

    @field_validator("parties")
    @classmethod
    def _parties(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v) or not {"guest", "host"} <= set(v):
            raise ValueError(f"parties must list guest and host once each, and optionally the "
                             f"arbiter: [guest, host] or [guest, host, arbiter]; got {v}")
        return [r for r in ("guest", "host", "arbiter") if r in v]

    @field_validator("key_bits")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError(f"key_bits must be even (two primes of key_bits/2 bits), got {v}")
        return v

    @field_validator("params", mode="before")
    @classmethod
    def _params(cls, v: Any, info: ValidationInfo) -> Any:
        algorithm = info.data.get("algorithm")
        if algorithm is None:        # the algorithm's own error says what is wrong
            return PsiParams.model_validate({})
        model = PARAMS[algorithm]
        if isinstance(v, model):
            return v
        if v is None:
            v = {}
        if isinstance(v, AlgorithmParams):
            v = v.model_dump(exclude_unset=True)
        if not isinstance(v, dict):
            raise ValueError(f"params must be a mapping of {algorithm}'s parameters")
        return model.model_validate(v)

    @model_validator(mode="after")
    def _synthetic(self) -> "JobConfig":
        if self.dataset == "synthetic":
            if self.synthetic is None:
                raise ValueError("dataset 'synthetic' needs a 'synthetic:' block, e.g. "
                                 "synthetic: {rows: 100000}")
            if self.algorithm not in SYNTHETIC_ALGORITHMS:
                raise ValueError(f"dataset 'synthetic' runs {list(SYNTHETIC_ALGORITHMS)} (its "
                                 f"rows are aligned by construction and its label is binary), "
                                 f"not {self.algorithm!r}")
            if getattr(self.params, "max_rows", None) is not None:
                raise ValueError("params.max_rows does not apply to dataset 'synthetic'; set "
                                 "synthetic.rows instead")
        elif self.synthetic is not None:
            raise ValueError(f"a 'synthetic:' block is for dataset 'synthetic', not "
                             f"{self.dataset!r}")
        return self

    def to_job(self) -> dict[str, Any]:
        """The plain dict ``run_job`` takes: params as the job gives them (defaults are the
        model's, applied wherever the dict is validated again); ``resume`` is for the transport,
        not the algorithm."""
        out = self.model_dump(exclude={"resume", "params", "synthetic"})
        out["params"] = self.params.model_dump(exclude_unset=True, by_alias=False)
        if self.synthetic is not None:       # only where it applies: other jobs keep their keys
            out["synthetic"] = self.synthetic.model_dump()
        return out


def validate_job(job: Mapping[str, Any] | JobConfig) -> dict[str, Any]:
    """``job`` validated (:class:`JobConfig`) and returned as the plain dict the algorithms take.

    Raises:
        ConfigError: naming the field (``params.<name>`` for a parameter) and what is allowed.
    """
    if isinstance(job, JobConfig):
        return job.to_job()
    if not isinstance(job, Mapping):
        raise ConfigError(f"job: expected a mapping of fields, got {type(job).__name__}")
    return validate(JobConfig, dict(job), "job").to_job()


def load_job(path: str | os.PathLike[str], **overrides: Any) -> JobConfig:
    """A job YAML (a path, or the name of a shipped one such as ``demo_vlr_breast.yaml``),
    validated; ``overrides`` replace top-level fields before validation.

    Raises:
        ConfigError: naming the file, the field and what is allowed.
    """
    p, data = read_yaml(path)
    if isinstance(data, dict):
        data.update(overrides)
    return validate(JobConfig, data, str(p))


def with_party_scale(job: JobConfig, scale_bits: int | None, party: str) -> JobConfig:
    """``job`` with a party's ``encoding.scale_bits`` applied: unset (None), or for an algorithm
    that encodes nothing (psi), the job is unchanged; otherwise it replaces the algorithm's default
    scale.

    Raises:
        ConfigError: the job itself sets ``params.scale_bits`` to another value.
    """
    model = job.params
    if scale_bits is None or "scale_bits" not in type(model).model_fields:
        return job
    if "scale_bits" in model.model_fields_set and getattr(model, "scale_bits") != scale_bits:
        raise ConfigError(f"job {job.job_id!r} sets params.scale_bits = "
                          f"{getattr(model, 'scale_bits')}, but party {party}'s config has "
                          f"encoding.scale_bits = {scale_bits}; make them equal or drop one")
    params = {**model.model_dump(exclude_unset=True), "scale_bits": scale_bits}
    return job.model_copy(update={"params": type(model).model_validate(params)})


def check_peer_scale(role: str, peer: str, own: int, theirs: Any) -> int:
    """The scale ``peer`` announced at job start, checked equal to this party's own.

    Raises:
        ProtocolViolation: the announcement is not an integer.
        ConfigError: the peer runs another scale (both parties' settings named).
    """
    if isinstance(theirs, bool) or not isinstance(theirs, int):
        raise ProtocolViolation(f"{role}: {peer}'s job-start message has no integer scale_bits "
                                f"(got {type(theirs).__name__})")
    if theirs != own:
        raise ConfigError(f"{role}: {peer} encodes at scale_bits = {theirs}, {role} at {own}; "
                          "every party of a job must use the same fixed-point scale (job "
                          "params.scale_bits, or each party's encoding.scale_bits)")
    return theirs
