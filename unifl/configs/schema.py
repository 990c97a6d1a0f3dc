"""The YAML schema of a party's hardware and network (:class:`PartyConfig`, DESIGN.md §5).  The job
every party runs has its schema with the algorithms it names (``unifl.app.params.JobConfig``).

Every model forbids unknown keys, so a typo is an error that names the field instead of a setting
silently ignored.  Loading (with the file name in every error) is in :mod:`unifl.configs.load`.

The party schema is assembled from the backend registry when a config is validated: each registered
backend (built-in folder or plug-in) may have one section named after it, checked by that backend's
own options model (``Backend.options_model``, the same model its constructor parses), and the
backend names a config uses are checked against the registry.  Nothing here names a backend.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError,
                      ValidatorFunctionWrapHandler, field_validator, model_validator)
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..core import registry
from ..core.errors import BackendUnavailable, ConfigError
from ..core.options import BackendOptions, BackendOptionsError

ROLES = ("guest", "host", "arbiter")

Role = Literal["guest", "host", "arbiter"]


def backend_names() -> list[str]:
    """Backend names a config accepts: every registered backend (built-in folders and plug-ins),
    available on this machine or not -- one that is not is skipped at run time with the reason
    (fallback), so a config stays portable between machines."""
    return registry.names()


def _check_backend(value: str, allow_auto: bool) -> str:
    allowed = backend_names() + (["auto"] if allow_auto else [])
    if value not in allowed:
        raise ValueError(f"unknown backend {value!r}; allowed: {', '.join(allowed)}")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EncodingSection(_Section):
    """Fixed-point encoding: reals travel encrypted as round(x·2^scale_bits).  Unset (null), every
    algorithm encodes at its own default (vertical LR/LinR and SecureBoost's gradients 24,
    horizontal LR 40); set, it replaces that default in every job this party runs, and a job
    whose ``params.scale_bits`` says otherwise is refused.  The scale is part of the protocol:
    the parties of a job compare theirs at job start (``unifl.app.params.check_peer_scale``)."""
    scale_bits: Optional[int] = Field(None, ge=1)

    @field_validator("scale_bits")
    @classmethod
    def _scale(cls, v: Optional[int]) -> Optional[int]:
        from ..phe_sdk.encoding import MAX_SCALE_BITS
        if v is not None and v > MAX_SCALE_BITS:
            raise ValueError(f"scale_bits must be at most {MAX_SCALE_BITS} (2^-{MAX_SCALE_BITS} "
                             f"is the finest step of a float64); got {v}")
        return v


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


class RaySection(_Section):
    """This party's own Ray cluster (``executor: ray``): its batches are split over ``workers`` Ray
    actors, each holding its own instance of ``backend`` (with its own fallback chain), so device
    state stays on the worker; only the batches and, once per key, the key records cross the
    cluster's network.  Each party has a cluster of its own: parties never share one.

    ``address``: null starts a local Ray instance for this process; ``auto`` joins the cluster this
    machine is a node of (``ray start`` ran here); ``HOST:PORT`` is the head node's GCS address.
    ``private_key_ops``: where the ops that take this party's private key run
    (:data:`unifl.core.contract.SECRET_OPS`: key-owner encryption, decryption, secret-exponent
    ModExps) -- ``local`` (the default) keeps p and q in this process, on the party's own
    ``backend``/``fallback`` chain; ``workers`` ships them to the actors too, which is only as safe
    as the cluster's nodes and links: off the loopback (``address`` a non-loopback ``HOST:PORT``
    or ``auto``) it needs ``tls`` -- Ray's own TLS, which every node of the cluster must run
    with (docs/scale.md §4) -- or, knowingly, ``insecure: true``, which warns at every start."""
    address: Optional[str] = None
    #: Ray's TLS for this party's process (RAY_USE_TLS and its files; every node runs the same)
    tls: Optional[TlsSection] = None
    #: allow ``private_key_ops: workers`` off the loopback without ``tls`` (warns at every start)
    insecure: bool = False
    workers: int = Field(2, ge=1, le=4096)
    backend: Optional[str] = None           # what each worker runs; null: the party's backend
    fallback: Optional[list[str]] = None    # each worker's chain after it; null: the party's
    resources_per_worker: dict[str, float] = Field(default_factory=lambda: {"CPU": 1.0})
    start_timeout_s: float = Field(60.0, gt=0, le=3600)
    private_key_ops: Literal["local", "workers"] = "local"
    #: a batch of fewer rows runs in the party's process (a round trip to a worker would cost more
    #: than it saves), and no worker gets a piece of fewer rows
    min_rows: int = Field(32, ge=1)
    #: ops that run in the party's process whatever the batch size: those that cost less to
    #: compute than to ship (a MontMult mod n² per element: 0.71x in process on the same cores,
    #: docs/scale.md); [] ships every op
    local_ops: list[str] = Field(default_factory=lambda: ["mont_mul", "mod_mul"])
    #: a worker that has not returned a piece after this long is stopped and its piece re-run
    #: elsewhere (a hung device); null: no limit (a piece takes as long as its batch needs)
    piece_timeout_s: Optional[float] = Field(None, gt=0)

    @field_validator("address")
    @classmethod
    def _address(cls, v: Optional[str]) -> Optional[str]:
        if v is None or v == "auto":
            return v
        try:
            return _check_addr(v)
        except ValueError:
            raise ValueError(f"ray.address {v!r} must be null (a local Ray instance), 'auto' "
                             "(the cluster this node joined) or HOST:PORT of the head node"
                             ) from None

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else _check_backend(v, allow_auto=False)

    @field_validator("fallback")
    @classmethod
    def _fallback(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        for name in v or []:
            _check_backend(name, allow_auto=False)
        return v

    @model_validator(mode="after")
    def _private_key_off_the_loopback(self) -> "RaySection":
        if self.private_key_ops != "workers" or self.tls is not None or self.insecure:
            return self
        if self.address is None or (self.address != "auto" and is_loopback_address(self.address)):
            return self            # a local instance (kept on the loopback; checked at start)
        raise ValueError(
            f"private_key_ops: workers ships the private key (p and q) to the Ray workers, and "
            f"ray.address {self.address!r} is off the loopback (or, auto, any node) with no TLS: "
            "the key would cross the cluster's network in clear. Configure ray.tls {cert, key, "
            "ca} (Ray's TLS, on every node of the cluster), keep private_key_ops: local, or, "
            "knowingly, set ray.insecure: true")

    def insecure_warning(self) -> str | None:
        """What every start must say when the private key goes to the workers without TLS by
        ``insecure: true``."""
        if self.private_key_ops != "workers" or self.tls is not None or not self.insecure:
            return None
        return ("WARNING: ray.insecure is true, ray.private_key_ops is workers and ray.tls is "
                f"not set: the private key (p and q) travels to the Ray workers at "
                f"{self.address or 'a local instance'} UNENCRYPTED; anyone on the cluster's "
                "network can read it. Configure ray.tls for real data.")

    @field_validator("local_ops")
    @classmethod
    def _local_ops(cls, v: list[str]) -> list[str]:
        from ..core.contract import OPS
        unknown = [op for op in v if op not in OPS]
        if unknown:
            raise ValueError(f"ray.local_ops: {unknown} are not ops of the contract; ops: "
                             f"{', '.join(OPS)}")
        return v

    @field_validator("resources_per_worker")
    @classmethod
    def _resources(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if not name or amount < 0 or amount != amount:
                raise ValueError(f"ray.resources_per_worker.{name}: a resource amount must be a "
                                 f"non-negative number, got {amount!r}")
        return v


#: a device entry: a scalar for the backend's selector, or a mapping of options (strict scalars:
#: ``true`` or ``1.0`` must not quietly become device 1)
DeviceEntry = Union[StrictInt, StrictStr, dict[str, Any]]


def _error(loc: tuple, message: str, value: Any) -> InitErrorDetails:
    """One field error at ``loc`` for a ValidationError (``load`` prints the message as is)."""
    loc = tuple(x if isinstance(x, (str, int)) and not isinstance(x, bool) else repr(x)
                for x in loc)
    # the message is a literal, not a template: braces in it (a YAML mapping) stay as they are
    return InitErrorDetails(type=PydanticCustomError("unifl_config", "{message}",
                                                     {"message": message}),
                            loc=loc, input=value)


def _option_errors(loc: tuple, exc: BackendOptionsError) -> list[InitErrorDetails]:
    """A backend options model's problems as field errors under ``loc`` (``<backend>.<option>``)."""
    out = []
    for p in exc.problems:
        message = p.message.replace("unknown option", "unknown field", 1) if p.unknown \
            else p.message
        out.append(_error(loc + (p.option,), message, p.value))
    return out


class PartyConfig(_Section):
    """One party's YAML (DESIGN.md §5).  ``devices``: ``all`` = one backend instance using every
    device it sees; a list = one instance per entry, batches split across them least-loaded first.
    An entry is a scalar that the backend's device selector turns into options
    (``Backend.select_device``: a device name, a thread or instance count) or a mapping of option
    overrides, optionally with ``backend:`` naming another backend (a heterogeneous set).

    Besides the fields below, a config may hold one section per registered backend, named after it
    and checked by that backend's options model: its options for that backend
    (:meth:`backend_options`).  The defaults of ``backend`` and ``fallback`` are the registry's
    chain of backends that need no special hardware."""
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    party: Role
    backend: str = Field(default_factory=lambda: registry.DEFAULT_CHAIN[0])
    fallback: list[str] = Field(default_factory=lambda: list(registry.DEFAULT_CHAIN))
    devices: Union[Literal["all"], list[DeviceEntry]] = "all"
    executor: Literal["threads", "serial", "ray"] = "threads"
    ray: Optional[RaySection] = None
    key_bits: int = Field(2048, ge=1024, le=8192)
    encoding: EncodingSection = Field(default_factory=lambda: EncodingSection.model_validate({}))
    network: NetworkSection = Field(default_factory=lambda: NetworkSection.model_validate({}))

    @model_validator(mode="wrap")
    @classmethod
    def _assemble(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> "PartyConfig":
        """Split the backend sections off the party's own fields, check each with its backend's
        model, then the fields, then the device entries against the backends they configure.  The
        errors of one stage are reported together, each at its field."""
        if not isinstance(data, dict):
            return handler(data)
        fields = {k: v for k, v in data.items() if k in cls.model_fields}
        errors: list[InitErrorDetails] = []
        sections: dict[str, dict[str, Any]] = {}
        registered = registry.names()
        for key, value in data.items():
            if key in cls.model_fields:
                continue
            if key not in registered:
                errors.append(_error((key,), "unknown field (neither a party setting nor a "
                                     f"registered backend; backends: {', '.join(registered)})",
                                     value))
                continue
            if not isinstance(value, dict):
                errors.append(_error((key,), f"the options of backend {key!r} must be a mapping",
                                     value))
                continue
            try:
                model = registry.options_model(key)
            except BackendUnavailable:
                # registered but not importable here (a broken plug-in): it is skipped at run time
                # with that reason, so its section cannot matter on this machine
                sections[key] = {str(k): v for k, v in value.items()}
                continue
            try:
                parsed = model.parse(value, backend=key)
            except BackendOptionsError as exc:
                errors.extend(_option_errors((key,), exc))
                continue
            sections[key] = {k: getattr(parsed, k) for k in value}     # as the model read them
        try:
            cfg = handler({**fields, **sections})
        except ValidationError as exc:
            if not errors:
                raise
            errors += [InitErrorDetails(type=PydanticCustomError(e["type"], e["msg"]),
                                        loc=e["loc"], input=e["input"]) for e in exc.errors()]
        if not errors:
            errors = cfg._device_errors()
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return cfg

    def _device_errors(self) -> list[InitErrorDetails]:
        """Each listed device entry as the options its backend will be started with: a scalar
        through the backend's device selector, merged over the backend's section."""
        if not isinstance(self.devices, list):
            return []
        errors = []
        for i, entry in enumerate(self.devices):
            name = self.backend
            if isinstance(entry, dict):
                name = str(entry.get("backend", name))
                overrides = {k: v for k, v in entry.items() if k != "backend"}
            elif name == "auto":
                continue            # the selector of the backend auto picks applies at run time
            else:
                try:
                    overrides = registry.backend_class(name).select_device(entry)
                except BackendUnavailable:
                    continue        # not importable here: skipped at run time with the reason
                except ConfigError as exc:
                    errors.append(_error(("devices", i), str(exc), entry))
                    continue
            if name == "auto":
                continue
            try:
                registry.options_model(name).parse({**self.backend_options(name), **overrides},
                                                   backend=name)
            except BackendUnavailable:
                continue
            except BackendOptionsError as exc:
                errors.extend(_option_errors(("devices", i), exc))
        return errors

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

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, v: Any) -> Any:
        # checked here, before the union, so an error names the entry instead of every union arm
        if v == "all":
            return v
        if not isinstance(v, list) or not v:
            raise ValueError("devices must be 'all' or a non-empty list")
        for i, entry in enumerate(v):
            if isinstance(entry, dict):
                if not all(isinstance(k, str) for k in entry):
                    raise ValueError(f"devices[{i}]: option names must be strings")
                if "backend" in entry:
                    _check_backend(str(entry["backend"]), allow_auto=False)
            elif isinstance(entry, bool) or not isinstance(entry, (int, str)):
                raise ValueError(f"devices[{i}] must be a device selector (an integer or a "
                                 f"string) or a mapping of options, got {entry!r}")
        return v

    @model_validator(mode="after")
    def _peers_are_others(self) -> "PartyConfig":
        if self.party in self.network.peers:
            raise ValueError(f"network.peers lists this party's own role {self.party!r}")
        return self

    @model_validator(mode="after")
    def _ray_section_needs_ray(self) -> "PartyConfig":
        # a section that would be silently ignored is a mistake, not a setting
        if self.ray is not None and self.executor != "ray":
            raise ValueError(f"ray: the section is given but executor is {self.executor!r}; set "
                             "executor: ray to run on the cluster, or remove the section")
        if self.executor == "ray" and self.ray is None:
            object.__setattr__(self, "ray", RaySection.model_validate({}))
        return self

    def backend_options(self, name: str) -> dict[str, Any]:
        """The options this config gives backend ``name`` (its section, as its model read them;
        the model's defaults supply the rest): keyword arguments for the backend's constructor."""
        return dict((self.model_extra or {}).get(name) or {})

    def options(self, name: str) -> BackendOptions:
        """Backend ``name``'s full options under this config: its section over the model's
        defaults.  BackendUnavailable when the backend cannot be imported here."""
        return registry.options_model(name).parse(self.backend_options(name), backend=name)

