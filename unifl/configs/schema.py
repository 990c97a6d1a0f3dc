"""The two YAML schemas of a run: a party's hardware and network (:class:`PartyConfig`, DESIGN.md §5)
and the job every party runs (:class:`JobConfig`, the ``job`` dict of ``unifl.app.jobs.run_job``).

Every model forbids unknown keys, so a typo is an error that names the field instead of a setting
silently ignored.  Loading (with the file name in every error) is in :mod:`unifl.configs.load`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ROLES = ("guest", "host", "arbiter")
#: Backends a config may name even when this checkout lacks them: they are then skipped at run time
#: with the reason (fallback), not rejected at load time -- a config is portable between machines.
KNOWN_BACKENDS = ("cpu", "native", "gpu", "qat", "fpga")
ALGORITHMS = ("psi", "vlr", "vlinr", "hlr", "secureboost", "psi+vlr", "psi+vlinr")
DATASETS = ("breast", "motor", "default_credit")

Role = Literal["guest", "host", "arbiter"]


def backend_names() -> list[str]:
    """Backend names a config accepts: the known ones plus any registered (plug-in) backend."""
    from ..core import registry
    return sorted(set(KNOWN_BACKENDS) | set(registry.names()))


def _check_backend(value: str, allow_auto: bool) -> str:
    allowed = backend_names() + (["auto"] if allow_auto else [])
    if value not in allowed:
        raise ValueError(f"unknown backend {value!r}; allowed: {', '.join(allowed)}")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EncodingSection(_Section):
    """Fixed-point encoding: floats are scaled by 2^scale_bits before encryption.  Both parties
    must use the same scale (it is part of the protocol), and the FL algorithms use the SDK's
    default, so another value is refused rather than silently ignored."""
    scale_bits: int = Field(24, ge=1, le=128)

    @field_validator("scale_bits")
    @classmethod
    def _scale(cls, v: int) -> int:
        from ..phe_sdk.encoding import DEFAULT_SCALE_BITS
        if v != DEFAULT_SCALE_BITS:
            raise ValueError(f"the FL algorithms encode at scale_bits={DEFAULT_SCALE_BITS} (the "
                             f"scale is part of the protocol both parties run); got {v}")
        return v


class FpgaSection(_Section):
    """Options of the ``fpga`` backend (see unifl/backends/fpga/__init__.py)."""
    binary: Optional[str] = None          # prebuilt .aocx / .xclbin; None builds the OpenCL source
    platform: Optional[str] = None        # substring of the OpenCL platform name
    device: Optional[str] = None          # substring of the OpenCL device name
    engines: int = Field(16, ge=1)        # processing elements per launch
    mode: Optional[Literal["montmul", "modexp"]] = None   # None: env UNIFL_FPGA_MODE, else montmul
    chunk: Optional[int] = Field(None, ge=1)          # rows per transfer
    in_flight: Optional[int] = Field(None, ge=1)      # ring slots / queues
    local_size: Optional[int] = Field(None, ge=1)     # OpenCL work-group size
    build_options: Optional[str] = None               # extra OpenCL compiler flags
    window: Optional[int] = Field(None, ge=1, le=8)   # on-device ModExp window (mode: modexp)


class QatSection(_Section):
    """Options of the ``qat`` backend (see unifl/backends/qat/__init__.py)."""
    library: Optional[str] = None         # path/soname of libqat, or "simulator"; None = default
    instances: Union[Literal["all"], int] = Field("all")   # "all" or how many crypto instances
    max_in_flight: int = Field(96, ge=1)  # outstanding requests per instance (HE-QAT: 96)
    cpu_share: float = Field(0.0, ge=0.0, lt=1.0)   # fraction of ModExps run on the CPU beside it
    simulator: Optional[bool] = None      # allow the simulator when no card (None: env / yes)
    section: Optional[str] = None         # process section of the QAT config file (default SSL)
    matmul_on_qat: bool = False           # Alg. 7 multi-exponentiation on the card

    @field_validator("instances")
    @classmethod
    def _instances(cls, v):
        if v != "all" and (isinstance(v, bool) or v < 1):
            raise ValueError(f"instances must be 'all' or a positive integer, got {v!r}")
        return v


class GpuSection(_Section):
    """Options of the ``gpu`` backend: which CUDA devices."""
    devices: Union[Literal["all"], list[int]] = "all"


class NativeSection(_Section):
    """Options of the ``native`` backend: worker threads (None = one per hardware thread)."""
    threads: Optional[int] = Field(None, ge=1)


class TlsSection(_Section):
    """Mutual TLS: this party's certificate and key, and the CA that signed every party's cert."""
    cert: str
    key: str
    ca: str


_ADDR = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def _check_addr(value: str) -> str:
    m = _ADDR.match(value)
    if not m or not 0 <= int(m.group(2)) <= 65535:
        raise ValueError(f"address {value!r} must be HOST:PORT (port 0-65535)")
    return value


def is_loopback_address(address: str) -> bool:
    """True when ``HOST:PORT`` (or a bare host) stays on this machine: 127.0.0.0/8, ::1 or
    ``localhost``.  A wildcard listen (``0.0.0.0``, ``[::]``) and any other host name are not:
    they reach, or can be reached from, the network."""
    host = address.rsplit(":", 1)[0] if _ADDR.match(address) else address
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False                     # a host name: resolves to who knows where
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


class NetworkSection(_Section):
    """Where this party listens, where its peers are, TLS, and the message size and receive limits.

    Without ``tls`` every address must be on the loopback: plaintext gRPC carries no identity and
    no secrecy, so a party listening on or dialling the network needs mutual TLS, or an explicit
    ``insecure: true`` (then every start warns that the link is unauthenticated and unencrypted).
    """
    listen: str = "127.0.0.1:50052"
    peers: dict[Role, str] = Field(default_factory=dict)
    tls: Optional[TlsSection] = None
    insecure: bool = False               # allow plaintext off the loopback (never for real data)
    max_message_mb: float = Field(64.0, gt=0, le=2000)   # gRPC caps a message below 2 GiB
    timeout_s: float = Field(120.0, gt=0)                 # every receive gives up after this
    liveness_s: float = Field(5.0, gt=0)  # a peer whose pings fail this long has stopped
    #: what one peer may have waiting in this party's queues (None: 16 x max_message_mb)
    max_queued_mb: Optional[float] = Field(None, gt=0)
    max_queued_messages: int = Field(4096, ge=1)

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        return _check_addr(v)

    @field_validator("peers")
    @classmethod
    def _peers(cls, v: dict) -> dict:
        for addr in v.values():
            _check_addr(addr)
        return v

    @model_validator(mode="after")
    def _tls_off_the_loopback(self) -> "NetworkSection":
        if self.max_queued_mb is not None and self.max_queued_mb < self.max_message_mb:
            raise ValueError(f"network.max_queued_mb ({self.max_queued_mb:g}) is below "
                             f"network.max_message_mb ({self.max_message_mb:g}): one message "
                             "could never be queued")
        if self.tls is not None or self.insecure:
            return self
        off = ([("network.listen", self.listen)] if not is_loopback_address(self.listen) else [])
        off += [(f"network.peers.{role}", addr) for role, addr in self.peers.items()
                if not is_loopback_address(addr)]
        if off:
            where = ", ".join(f"{name} = {addr!r}" for name, addr in off)
            raise ValueError(f"{where}: off the loopback without TLS; plaintext gRPC neither "
                             "authenticates nor encrypts. Configure mutual TLS (network.tls: "
                             "{cert, key, ca}), use a loopback address (127.0.0.1, ::1, "
                             "localhost), or, knowingly, set network.insecure: true")
        return self

    def insecure_warning(self) -> str | None:
        """What every start of a party must say when it runs plaintext by ``insecure: true``."""
        if self.tls is not None or not self.insecure:
            return None
        return ("WARNING: network.insecure is true and no TLS is configured: the links of this "
                f"party (listen {self.listen}, peers {dict(self.peers)}) are UNAUTHENTICATED and "
                "UNENCRYPTED; anyone on the network can read, forge or replay its messages. "
                "Configure network.tls (mutual TLS) for real data.")


DeviceEntry = Union[int, str, dict[str, Any]]


class PartyConfig(_Section):
    """One party's YAML (DESIGN.md §5).  ``devices``: ``all`` = one backend instance using every
    device it sees; a list = one instance per entry, batches split across them least-loaded first.
    An entry is a scalar device selector (fpga/gpu: ``device``, qat: ``instances``, native:
    ``threads``) or a mapping of option overrides, optionally with ``backend:`` naming another
    backend (a heterogeneous set such as ``[{backend: cpu}, {backend: native, threads: 1}]``)."""
    party: Role
    backend: str = "native"
    fallback: list[str] = Field(default_factory=lambda: ["native", "cpu"])
    devices: Union[Literal["all"], list[DeviceEntry]] = "all"
    executor: Literal["threads", "serial"] = "threads"
    key_bits: int = Field(2048, ge=1024, le=8192)
    encoding: EncodingSection = Field(default_factory=EncodingSection)
    fpga: FpgaSection = Field(default_factory=FpgaSection)
    qat: QatSection = Field(default_factory=QatSection)
    gpu: GpuSection = Field(default_factory=GpuSection)
    native: NativeSection = Field(default_factory=NativeSection)
    network: NetworkSection = Field(default_factory=NetworkSection)

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        return _check_backend(v, allow_auto=True)

    @field_validator("fallback")
    @classmethod
    def _fallback(cls, v: list[str]) -> list[str]:
        for name in v:
            _check_backend(name, allow_auto=False)
        return v

    @field_validator("devices")
    @classmethod
    def _devices(cls, v):
        if isinstance(v, list):
            if not v:
                raise ValueError("devices must be 'all' or a non-empty list")
            for entry in v:
                if isinstance(entry, dict) and "backend" in entry:
                    _check_backend(str(entry["backend"]), allow_auto=False)
        return v

    @model_validator(mode="after")
    def _peers_are_others(self) -> "PartyConfig":
        if self.party in self.network.peers:
            raise ValueError(f"network.peers lists this party's own role {self.party!r}")
        return self

    def backend_options(self, name: str) -> dict[str, Any]:
        """Keyword options for backend ``name`` from its section (unset values left to the backend)."""
        section = getattr(self, name, None)
        if not isinstance(section, _Section):
            return {}
        return {k: v for k, v in section.model_dump().items() if v is not None}


class JobConfig(_Section):
    """A job YAML: what every party runs (``unifl.app.jobs.run_job``'s ``job`` dict)."""
    job_id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    algorithm: Literal["psi", "vlr", "vlinr", "hlr", "secureboost", "psi+vlr", "psi+vlinr"]
    dataset: str = "breast"               # breast | motor | default_credit, or a path
    parties: list[Role] = Field(default_factory=lambda: ["guest", "host"])
    seed: int = 0
    key_bits: int = Field(2048, ge=1024, le=8192)
    params: dict[str, Any] = Field(default_factory=dict)
    #: the job continues after a party restarted: its peers accept the restarted party's new
    #: session; otherwise a second session from a party is refused (no replay into a new run)
    resume: bool = False

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: str) -> str:
        if v not in DATASETS and "/" not in v and not v.endswith(".csv"):
            raise ValueError(f"unknown dataset {v!r}; allowed: {', '.join(DATASETS)} or a path")
        return v

    @field_validator("parties")
    @classmethod
    def _parties(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v) or not {"guest", "host"} <= set(v):
            raise ValueError("parties must list guest and host once each (arbiter optional)")
        return v

    def to_job(self) -> dict[str, Any]:
        """The plain dict ``run_job`` takes (``resume`` is for the transport, not the algorithm)."""
        return self.model_dump(exclude={"resume"})
