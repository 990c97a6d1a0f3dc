"""The YAML schema of a party's hardware and network (:class:`PartyConfig`, DESIGN.md §5).  The job
every party runs has its schema with the algorithms it names (``unifl.app.params.JobConfig``).

Every section forbids unknown keys, so a typo is an error that names the field instead of a setting
silently ignored.  Loading (with the file name in every error) is in :mod:`unifl.configs.load`.

The party schema is assembled from the backend registry when a config is validated: each registered
backend (built-in folder or plug-in) may have one section named after it, checked by that backend's
own options model (``Backend.options_model``, the same model its constructor parses), and the
backend names a config uses are checked against the registry.  Nothing here names a backend.

The sections are declared on :mod:`unifl.configs.model`, plain Python like the backends' options
models, not pydantic: the same schema validates a party in ``unifl run`` and in a FATE worker,
whose venv pins pydantic 1 (:mod:`unifl.fate.party`).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Iterable, Literal, Optional, Union

from ..core import registry
from ..core.errors import BackendUnavailable, ConfigError
from ..core.options import BackendOptions, BackendOptionsError
from ..core.state import PoolLimits
from .model import FieldError, SchemaError, Section, setting

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


def _scale_bits(v: Optional[int]) -> Optional[int]:
    from ..phe_sdk.encoding import MAX_SCALE_BITS
    if v is not None and v > MAX_SCALE_BITS:
        raise ValueError(f"scale_bits must be at most {MAX_SCALE_BITS} (2^-{MAX_SCALE_BITS} "
                         f"is the finest step of a float64); got {v}")
    return v


class EncodingSection(Section):
    """Fixed-point encoding: reals travel encrypted as round(x·2^scale_bits).  Unset (null), every
    algorithm encodes at its own default (vertical LR/LinR and SecureBoost's gradients 24,
    horizontal LR 40); set, it replaces that default in every job this party runs, and a job
    whose ``params.scale_bits`` says otherwise is refused.  The scale is part of the protocol:
    the parties of a job compare theirs at job start (``unifl.app.params.check_peer_scale``)."""
    scale_bits: Optional[int] = setting(None, ge=1, check=_scale_bits)


class ObfuscatorsSection(Section):
    """Paillier obfuscators r^n computed ahead of use (``PublicKey.obfuscators``): one pool per
    key and backend instance, filled at job start and while the party waits on its peer, each
    factor used once.  ``max_mb``: the memory bound of one pool (0 turns pools off: every
    encryption computes its factor on the spot); ``fill_batch``: the most factors one filling call
    computes (an accelerator's plateau needs thousands); ``slice_ms``: the length of one background
    filling call, i.e. how long after the wait ends the refill may still run."""
    max_mb: float = setting(64.0, ge=0, le=1 << 20)
    fill_batch: int = setting(4096, ge=1, le=1 << 22)
    slice_ms: float = setting(50.0, gt=0, le=60_000)

    def limits(self) -> PoolLimits:
        """The :class:`~unifl.core.state.PoolLimits` these settings give."""
        return PoolLimits(max_bytes=int(self.max_mb * (1 << 20)), fill_batch=self.fill_batch,
                          slice_seconds=self.slice_ms / 1000)


def _dispatch_cpu(v: Optional[str]) -> Optional[str]:
    return None if v is None else _check_backend(v, allow_auto=False)


def _dispatch_pin(v: dict[str, str]) -> dict[str, str]:
    from ..core.contract import OPS
    unknown = sorted(k for k in v if k != "default" and k not in OPS)
    if unknown:
        raise ValueError(f"dispatch.pin: {unknown} are not ops of the contract; keys are "
                         f"'default' or one of {', '.join(OPS)}")
    return v


class DispatchSection(Section):
    """Size-aware dispatch (:mod:`unifl.scheduler.dispatch`): each call of the party's accelerator
    runs where it is fastest for its size -- the accelerator, the party's CPU backend, or both.

    ``mode``: ``off`` (every call on the chosen backend), ``auto`` (cost models measured at start
    and cached), ``calibrated`` (models from the calibration cache, measured where missing) or
    ``pinned`` (each op where ``pin`` says).  ``cpu``: the CPU backend (null: native if it is
    built, else cpu).  ``margin``: how much faster a route must be predicted to be taken over the
    CPU (0.2: 20 %).  ``min_gain_ms``: and by at least this many milliseconds (below one, a
    launch's jitter and a card shared with other work outweigh the gain).  ``split``: allow a call
    to be cut between both.  ``pin``: op name (or
    ``default``) -> ``accelerator`` | ``cpu``, for ``mode: pinned`` only.  ``cache``: read and
    write the calibration cache (the measured lines, and the corrections each job learnt of its
    lines and splits, written back when the party's backend closes).  ``calibration_budget_s``:
    the most one line's measurement may take on one backend."""
    mode: Literal["off", "auto", "calibrated", "pinned"] = "off"
    cpu: Optional[str] = setting(None, check=_dispatch_cpu)
    margin: float = setting(0.2, ge=0, le=10)
    min_gain_ms: float = setting(1.0, ge=0, le=10_000)
    split: bool = True
    pin: dict[str, Literal["accelerator", "cpu"]] = setting(factory=dict, check=_dispatch_pin)
    cache: bool = True
    calibration_budget_s: float = setting(1.0, gt=0, le=600)

    def _rules(self) -> Iterable[tuple[tuple[str | int, ...], str]]:
        # a setting that would be silently ignored is a mistake, not a setting
        if self.pin and self.mode != "pinned":
            yield (), (f"dispatch.pin is given but dispatch.mode is {self.mode!r}; set "
                       "mode: pinned to place ops by name, or remove pin")
        if self.mode == "pinned" and not self.pin:
            yield (), "dispatch.mode pinned needs dispatch.pin (op or 'default' -> accelerator | cpu)"


class TlsSection(Section):
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


def _check_peers(v: dict[str, str]) -> dict[str, str]:
    for addr in v.values():
        _check_addr(addr)
    return v


class NetworkSection(Section):
    """Where this party listens, where its peers are, TLS, and the message size and receive limits.

    Without ``tls`` every address must be on the loopback: plaintext gRPC carries no identity and
    no secrecy, so a party listening on or dialling the network needs mutual TLS, or an explicit
    ``insecure: true`` (then every start warns that the link is unauthenticated and unencrypted).
    """
    listen: str = setting("127.0.0.1:50052", check=_check_addr)
    peers: dict[Role, str] = setting(factory=dict, check=_check_peers)
    tls: Optional[TlsSection] = None
    insecure: bool = False               # allow plaintext off the loopback (never for real data)
    max_message_mb: float = setting(64.0, gt=0, le=2000)   # gRPC caps a message below 2 GiB
    timeout_s: float = setting(120.0, gt=0)                 # every receive gives up after this
    #: a peer that has answered nothing for this long (dead or partitioned) is PeerUnavailable
    liveness_s: float = setting(5.0, gt=0)
    #: what one peer may have waiting in this party's queues (None: 16 x max_message_mb)
    max_queued_mb: Optional[float] = setting(None, gt=0)
    max_queued_messages: int = setting(4096, ge=1)

    def _rules(self) -> Iterable[tuple[tuple[str | int, ...], str]]:
        if self.max_queued_mb is not None and self.max_queued_mb < self.max_message_mb:
            yield (), (f"network.max_queued_mb ({self.max_queued_mb:g}) is below "
                       f"network.max_message_mb ({self.max_message_mb:g}): one message "
                       "could never be queued")
        if self.tls is not None or self.insecure:
            return
        off = ([("network.listen", self.listen)] if not is_loopback_address(self.listen) else [])
        off += [(f"network.peers.{role}", addr) for role, addr in self.peers.items()
                if not is_loopback_address(addr)]
        if off:
            where = ", ".join(f"{name} = {addr!r}" for name, addr in off)
            yield (), (f"{where}: off the loopback without TLS; plaintext gRPC neither "
                       "authenticates nor encrypts. Configure mutual TLS (network.tls: "
                       "{cert, key, ca}), use a loopback address (127.0.0.1, ::1, "
                       "localhost), or, knowingly, set network.insecure: true")

    def insecure_warning(self) -> str | None:
        """What every start of a party must say when it runs plaintext by ``insecure: true``."""
        if self.tls is not None or not self.insecure:
            return None
        return ("WARNING: network.insecure is true and no TLS is configured: the links of this "
                f"party (listen {self.listen}, peers {dict(self.peers)}) are UNAUTHENTICATED and "
                "UNENCRYPTED; anyone on the network can read, forge or replay its messages. "
                "Configure network.tls (mutual TLS) for real data.")


def _ray_address(v: Optional[str]) -> Optional[str]:
    if v is None or v == "auto":
        return v
    try:
        return _check_addr(v)
    except ValueError:
        raise ValueError(f"ray.address {v!r} must be null (a local Ray instance), 'auto' "
                         "(the cluster this node joined) or HOST:PORT of the head node") from None


def _ray_backend(v: Optional[str]) -> Optional[str]:
    return None if v is None else _check_backend(v, allow_auto=False)


def _backend_list(v: Optional[list[str]]) -> Optional[list[str]]:
    for name in v or []:
        _check_backend(name, allow_auto=False)
    return v


def _local_ops(v: list[str]) -> list[str]:
    from ..core.contract import OPS
    unknown = [op for op in v if op not in OPS]
    if unknown:
        raise ValueError(f"ray.local_ops: {unknown} are not ops of the contract; ops: "
                         f"{', '.join(OPS)}")
    return v


def _resources(v: dict[str, float]) -> dict[str, float]:
    for name, amount in v.items():
        if not name or amount < 0:
            raise ValueError(f"ray.resources_per_worker.{name}: a resource amount must be a "
                             f"non-negative number, got {amount!r}")
    return v


class RaySection(Section):
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
    address: Optional[str] = setting(None, check=_ray_address)
    #: Ray's TLS for this party's process (RAY_USE_TLS and its files; every node runs the same)
    tls: Optional[TlsSection] = None
    #: allow ``private_key_ops: workers`` off the loopback without ``tls`` (warns at every start)
    insecure: bool = False
    workers: int = setting(2, ge=1, le=4096)
    backend: Optional[str] = setting(None, check=_ray_backend)  # each worker's; null: the party's
    fallback: Optional[list[str]] = setting(None, check=_backend_list)  # null: the party's
    resources_per_worker: dict[str, float] = setting(factory=lambda: {"CPU": 1.0},
                                                     check=_resources)
    start_timeout_s: float = setting(60.0, gt=0, le=3600)
    private_key_ops: Literal["local", "workers"] = "local"
    #: a batch of fewer rows runs in the party's process (a round trip to a worker would cost more
    #: than it saves), and no worker gets a piece of fewer rows
    min_rows: int = setting(32, ge=1)
    #: ops that run in the party's process whatever the batch size: those that cost less to
    #: compute than to ship (a MontMult mod n² per element: 0.71x in process on the same cores,
    #: docs/scale.md); [] ships every op
    local_ops: list[str] = setting(factory=lambda: ["mont_mul", "mod_mul"], check=_local_ops)
    #: a worker that has not returned a piece after this long is stopped and its piece re-run
    #: elsewhere (a hung device); null: no limit (a piece takes as long as its batch needs)
    piece_timeout_s: Optional[float] = setting(None, gt=0)

    def _rules(self) -> Iterable[tuple[tuple[str | int, ...], str]]:
        if self.private_key_ops != "workers" or self.tls is not None or self.insecure:
            return
        if self.address is None or (self.address != "auto" and is_loopback_address(self.address)):
            return             # a local instance (kept on the loopback; checked at start)
        yield (), (f"private_key_ops: workers ships the private key (p and q) to the Ray workers, "
                   f"and ray.address {self.address!r} is off the loopback (or, auto, any node) "
                   "with no TLS: the key would cross the cluster's network in clear. Configure "
                   "ray.tls {cert, key, ca} (Ray's TLS, on every node of the cluster), keep "
                   "private_key_ops: local, or, knowingly, set ray.insecure: true")

    def insecure_warning(self) -> str | None:
        """What every start must say when the private key goes to the workers without TLS by
        ``insecure: true``."""
        if self.private_key_ops != "workers" or self.tls is not None or not self.insecure:
            return None
        return ("WARNING: ray.insecure is true, ray.private_key_ops is workers and ray.tls is "
                f"not set: the private key (p and q) travels to the Ray workers at "
                f"{self.address or 'a local instance'} UNENCRYPTED; anyone on the cluster's "
                "network can read it. Configure ray.tls for real data.")


#: a device entry: a scalar for the backend's selector, or a mapping of options (strict scalars:
#: ``true`` or ``1.0`` must not quietly become device 1)
DeviceEntry = Union[int, str, dict[str, Any]]


def _option_errors(loc: tuple[str | int, ...], exc: BackendOptionsError) -> list[FieldError]:
    """A backend options model's problems as field errors under ``loc`` (``<backend>.<option>``)."""
    out = []
    for p in exc.problems:
        message = p.message.replace("unknown option", "unknown field", 1) if p.unknown \
            else p.message
        out.append(FieldError(loc + (p.option,), message, p.value))
    return out


def _default_backend() -> str:
    return registry.DEFAULT_CHAIN[0]


def _default_fallback() -> list[str]:
    return list(registry.DEFAULT_CHAIN)


def _party_backend(v: str) -> str:
    return _check_backend(v, allow_auto=True)


def _fallback(v: list[str]) -> list[str]:
    for name in v:
        _check_backend(name, allow_auto=False)
    return v


def _devices_before(v: Any) -> Any:
    # checked before the annotation, so an error names the entry instead of every union arm
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


class PartyConfig(Section):
    """One party's YAML (DESIGN.md §5).  ``devices``: ``all`` = one backend instance using every
    device it sees; a list = one instance per entry, batches split across them least-loaded first.
    An entry is a scalar that the backend's device selector turns into options
    (``Backend.select_device``: a device name, a thread or instance count) or a mapping of option
    overrides, optionally with ``backend:`` naming another backend (a heterogeneous set).

    Besides the fields below, a config may hold one section per registered backend, named after it
    and checked by that backend's options model: its options for that backend
    (:meth:`backend_options`).  The defaults of ``backend`` and ``fallback`` are the registry's
    chain of backends that need no special hardware."""

    party: Role
    backend: str = setting(factory=_default_backend, check=_party_backend)
    fallback: list[str] = setting(factory=_default_fallback, check=_fallback)
    devices: Union[Literal["all"], list[DeviceEntry]] = setting("all", before=_devices_before)
    executor: Literal["threads", "serial", "ray"] = "threads"
    ray: Optional[RaySection] = None
    key_bits: int = setting(2048, ge=1024, le=8192)
    encoding: EncodingSection = setting(factory=EncodingSection)
    network: NetworkSection = setting(factory=NetworkSection)
    obfuscators: ObfuscatorsSection = setting(factory=ObfuscatorsSection)
    dispatch: DispatchSection = setting(factory=DispatchSection)

    @classmethod
    def _split_extra(cls, data: dict[str, Any], loc: tuple[str | int, ...],
                     errors: list[FieldError]) -> dict[str, Any]:
        """The backend sections: each key that is no party setting must name a registered backend,
        and its mapping is checked by that backend's options model (kept as the model read it)."""
        sections: dict[str, Any] = {}
        registered = registry.names()
        for key, value in data.items():
            if key in cls.fields():
                continue
            if key not in registered:
                errors.append(FieldError(loc + (str(key),), "unknown field (neither a party "
                                         "setting nor a registered backend; backends: "
                                         f"{', '.join(registered)})", value))
                continue
            if not isinstance(value, dict):
                errors.append(FieldError(loc + (key,), f"the options of backend {key!r} must be "
                                         "a mapping", value))
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
                errors.extend(_option_errors(loc + (key,), exc))
                continue
            sections[key] = {k: getattr(parsed, k) for k in value}     # as the model read them
        return sections

    def _rules(self) -> Iterable[tuple[tuple[str | int, ...], str]]:
        if self.party in self.network.peers:
            yield (), f"network.peers lists this party's own role {self.party!r}"
        # a section that would be silently ignored is a mistake, not a setting
        if self.ray is not None and self.executor != "ray":
            yield (), (f"ray: the section is given but executor is {self.executor!r}; set "
                       "executor: ray to run on the cluster, or remove the section")
        if self.executor == "ray" and self.ray is None:
            object.__setattr__(self, "ray", RaySection())
        if self.dispatch.mode != "off" and self.executor == "ray":
            yield (), ("dispatch: size-aware dispatch places calls between this process's "
                       "accelerator and CPU backend; with executor: ray the workers hold the "
                       "backends (ray.min_rows and ray.local_ops keep small calls local). Set "
                       "dispatch.mode: off, or another executor")
        yield from self._device_errors()

    def _device_errors(self) -> Iterable[tuple[tuple[str | int, ...], str]]:
        """Each listed device entry as the options its backend will be started with: a scalar
        through the backend's device selector, merged over the backend's section."""
        if not isinstance(self.devices, list):
            return
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
                    yield ("devices", i), str(exc)
                    continue
            if name == "auto":
                continue
            try:
                registry.options_model(name).parse({**self.backend_options(name), **overrides},
                                                   backend=name)
            except BackendUnavailable:
                continue
            except BackendOptionsError as exc:
                for err in _option_errors(("devices", i), exc):
                    yield err.loc, err.msg

    def backend_options(self, name: str) -> dict[str, Any]:
        """The options this config gives backend ``name`` (its section, as its model read it;
        the model's defaults supply the rest): keyword arguments for the backend's constructor."""
        return dict((self.__dict__.get("_extra") or {}).get(name) or {})

    def options(self, name: str) -> BackendOptions:
        """Backend ``name``'s full options under this config: its section over the model's
        defaults.  BackendUnavailable when the backend cannot be imported here."""
        return registry.options_model(name).parse(self.backend_options(name), backend=name)


__all__ = ["PartyConfig", "NetworkSection", "RaySection", "TlsSection", "EncodingSection",
           "ObfuscatorsSection", "DispatchSection",
           "SchemaError", "ROLES", "backend_names", "is_loopback_address"]
