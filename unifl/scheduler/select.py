"""From a party's config to the Backend it computes on: registry lookup with the config's options,
the fallback chain, ``auto`` ranking, one instance per listed device, counting.

Chain: ``[backend] + fallback`` (``auto``: the available backends fastest first by calibration,
then the fallback list).  A candidate is skipped -- logged at WARNING with the reason and recorded
in ``.selection.fallback_events`` so the run can print it -- when it probes unavailable, when its
constructor fails, when it does not serve what the party will ask of it (``Backend.supports``
with the party's :func:`party_request`: the moduli of its key size; e.g. a prebuilt FPGA binary
without their kernel sizes), or when its start-up self-test (two MontMults at the party's widest
modulus, checked against Python integers) fails or disagrees.  A ``ConfigError`` from a
constructor is the user's mistake and is raised, not skipped.

At run time the rest of the chain stays behind the chosen backend (:mod:`unifl.scheduler.fallback`):
a backend that fails in the middle of a batch has that batch re-run on the next backend of the
chain, started then, and is not used again in the job; ``.selection.runtime_fallbacks`` and
``.report()`` say which op fell back from which backend to which, and why.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any

from ..core import registry
from ..core.backend import Backend, Request
from ..core.errors import BackendUnavailable, ConfigError
from .calibrate import calibrated_seconds
from .counting import CountingBackend
from .dispatch import DispatchBackend, DispatchPolicy, calibrate_at_start, load_cached
from . import tuning
from .executor import make_executor
from .fallback import ChainMember, FallbackChain
from .multi import MultiDeviceBackend
from .selection import Selection

if TYPE_CHECKING:
    from ..configs import PartyConfig

log = logging.getLogger("unifl.scheduler")


def self_test(backend: Backend, bits: int = 2048) -> None:
    """Two MontMults on a random odd ``bits``-bit modulus, checked against Python integers; raises
    BackendUnavailable when the backend fails or answers wrong (a broken driver must not be used)."""
    from .. import base_op
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    ctx = base_op.mont_context(m)
    a = [secrets.randbelow(m) for _ in range(2)]
    b = [secrets.randbelow(m) for _ in range(2)]
    got = base_op.from_limbs(base_op.mont_mul(backend, ctx, ctx.to_limbs(a), ctx.to_limbs(b)))
    want = [base_op.mont_mul_ref(x, y, m) for x, y in zip(a, b)]
    if got != want:
        raise BackendUnavailable(f"backend {backend.name!r} failed its start-up self-test "
                                 "(wrong MontMult result)")


def start(name: str, options: dict[str, Any], fresh: bool = False,
          request: Request | None = None) -> Backend:
    """An instance of backend ``name`` that passed its self-test and serves ``request`` (what the
    party will ask of it: ``Backend.supports``); BackendUnavailable (with the reason) otherwise.
    ``fresh``: a new instance even without options (one per listed device; otherwise the
    registry's shared instance is used)."""
    pr = registry.probe(name)
    if not pr.available:
        raise BackendUnavailable(f"{name}: {pr.reason or 'unavailable'}")
    try:
        if options or fresh:
            inst = registry.backend_class(name)(**options)
            inst.probe_result = pr
        else:
            inst = registry.backend(name)
        tuning.restore(inst)      # what an earlier instance on this device measured
        if request is not None:
            support = inst.supports(request)
            if not support:
                raise BackendUnavailable(f"{name}: does not serve this party's requests: "
                                         + "; ".join(support.reasons))
        # the self-test runs at a size the party will use (its widest modulus: n²)
        self_test(inst, max(request.modulus_bits) if request and request.modulus_bits else 2048)
        tuning.remember(inst)     # the self-test may have measured (again at close: counting.py)
    except (BackendUnavailable, ConfigError):
        raise
    except Exception as exc:  # noqa: BLE001 - any start failure means: try the next candidate
        raise BackendUnavailable(f"{name}: failed at start: {type(exc).__name__}: {exc}") from exc
    return inst


def party_request(cfg: PartyConfig) -> Request:
    """What a party with config ``cfg`` will ask of its backend: every op, on the moduli of
    Paillier at its ``key_bits`` (a job may use larger keys than the party's floor: a size missed
    here is still caught mid-run, by the fallback chain)."""
    return Request.paillier(cfg.key_bits)


def device_entries(cfg: PartyConfig, name: str,
                   primary: bool) -> list[tuple[str, dict[str, Any], str | None]]:
    """(backend, options, label) per device instance.  ``devices: all`` (or a fallback) is one
    instance, except for a backend whose instances drive one device each
    (``Backend.one_device_per_instance``): then one instance per device its probe lists, each
    selected by the backend's own ``select_device(index)``.

    A mapping entry is option overrides (``backend:`` picks another backend); a scalar entry is
    turned into options by the backend's own device selector (``Backend.select_device``).  Either
    is merged over the backend's section of the config.  BackendUnavailable when ``name`` cannot
    be imported here (so its selector is unknown); ConfigError when it has no selector."""
    if cfg.devices == "all" or not primary:
        cls = registry.backend_class(name) if registry.probe(name).available else None
        seen = registry.probe(name).devices
        if primary and cls is not None and cls.one_device_per_instance and len(seen) > 1:
            return [(name, {**cfg.backend_options(name), **cls.select_device(i)}, f"#{i}")
                    for i in range(len(seen))]
        return [(name, cfg.backend_options(name), None)]
    out: list[tuple[str, dict[str, Any], str | None]] = []
    for i, entry in enumerate(cfg.devices):
        if isinstance(entry, dict):
            extra = dict(entry)
            b = str(extra.pop("backend", name))
        else:
            b = name
            try:
                extra = registry.backend_class(name).select_device(entry)
            except ConfigError as exc:
                raise ConfigError(f"field 'devices[{i}]': {exc}") from None
        out.append((b, {**cfg.backend_options(b), **extra}, f"#{i}"))
    return out


def _rank_auto(cfg: PartyConfig,
               events: list[dict[str, str]]) -> tuple[list[str], list[tuple[str, float]]]:
    ranking = []
    for name in registry.names():
        if not registry.probe(name).available:
            continue
        opts = cfg.backend_options(name)

        def starter(n: str = name, o: dict[str, Any] = opts) -> Backend:
            return start(n, o, request=party_request(cfg))
        try:
            secs = calibrated_seconds(name, opts, starter)
        except BackendUnavailable as exc:
            events.append({"backend": name, "reason": str(exc)})
            log.warning("auto: skipping backend %r: %s", name, exc)
            continue
        ranking.append((name, secs))
    ranking.sort(key=lambda x: x[1])
    log.info("auto: ranking %s", ", ".join(f"{n} {s:.3f}s" for n, s in ranking))
    return [n for n, _ in ranking], ranking


def with_dispatch(cfg: PartyConfig, accelerator: CountingBackend | MultiDeviceBackend,
                  name: str) -> tuple[CountingBackend | MultiDeviceBackend, dict[str, Any]]:
    """``accelerator`` behind size-aware dispatch with the party's CPU backend
    (:mod:`unifl.scheduler.dispatch`), and what the selection record says about it.  Nothing to
    dispatch when the chosen backend is the CPU backend itself, or when that cannot start (said
    in the note, and the accelerator runs every call)."""
    d = cfg.dispatch
    mode = d.mode
    if mode == "off":
        raise ValueError("with_dispatch: dispatch.mode is off")
    cpu_name = d.cpu or next(n for n in (*registry.DEFAULT_CHAIN, "cpu")
                             if registry.probe(n).available)
    note: dict[str, Any] = {"mode": d.mode, "cpu": cpu_name, "margin": d.margin,
                            "min_gain_ms": d.min_gain_ms, "split": d.split}
    if name == cpu_name:
        return accelerator, {**note, "active": False,
                             "why": f"the party's backend {name!r} is its CPU backend"}
    try:
        inst = start(cpu_name, cfg.backend_options(cpu_name), fresh=True,
                     request=party_request(cfg))
    except BackendUnavailable as exc:
        log.warning("dispatch off: the CPU backend %r cannot start: %s", cpu_name, exc)
        return accelerator, {**note, "active": False, "why": f"{cpu_name}: {exc}"}
    cpu = CountingBackend(inst, device=", ".join(inst.devices) or cpu_name)
    policy = DispatchPolicy(mode=mode, margin=d.margin, min_gain_s=d.min_gain_ms / 1000,
                            split=d.split, pin=dict(d.pin),
                            cache=d.cache, budget_s=d.calibration_budget_s)
    models, splits = None, None
    if d.mode == "calibrated" and d.cache:
        models, splits = load_cached(accelerator, cpu)
    disp = DispatchBackend(accelerator, cpu, policy, models, splits)
    if models is not None:
        disp.calibration["cached"] = len(models[0].lines)
        disp.calibration["cached_corrections"] = {
            "lines": sum(len(m.correction) for m in models), "splits": len(splits or {})}
    if d.mode == "auto" or (d.mode == "calibrated" and not disp.models[0].lines):
        calibrate_at_start(disp, cfg.key_bits)
    note.update({"active": True, "accelerator": accelerator.describe(), "cpu": cpu.describe(),
                 "calibration": disp.calibration, "lines": disp.lines()})
    return disp, note


def _start_fallback(cfg: PartyConfig, name: str) -> CountingBackend:
    """A later link of the chain, started when the one before it failed mid-run (one instance:
    ``devices`` applies to the primary backend only, as at start)."""
    (b, opts, _), = device_entries(cfg, name, primary=False)
    inst = start(b, opts, request=party_request(cfg))
    return CountingBackend(inst, device=", ".join(inst.devices) or b)


def local_chain(cfg: PartyConfig) -> ChainMember:
    """The Backend for party config ``cfg`` (a :class:`unifl.configs.PartyConfig`) in this process:
    its devices here, split by the ``threads`` or ``serial`` executor (``executor: ray`` is
    :func:`unifl.scheduler.assemble.backend_from_config`'s business, which uses this for the chain
    each Ray worker and the party's own process hold).

    The result counts and times every op per backend and device (``.report()``), and says what was
    chosen and why in ``.selection`` (a :class:`~unifl.scheduler.selection.Selection`)."""
    events: list[dict[str, str]] = []
    ranking = None
    if cfg.backend == "auto":
        ranked, ranking = _rank_auto(cfg, events)
        chain = ranked + [f for f in cfg.fallback if f not in ranked]
    else:
        chain = [cfg.backend] + [f for f in cfg.fallback if f != cfg.backend]
    for pos, name in enumerate(chain):
        members: list[CountingBackend] = []
        try:
            entries = device_entries(cfg, name, primary=(pos == 0))
        except BackendUnavailable as exc:      # cannot even be imported here: the next candidate
            events.append({"backend": name, "reason": str(exc)})
            log.warning("backend %r not used: %s", name, exc)
            entries = []
        for b, opts, label in entries:
            try:
                inst = start(b, opts, fresh=label is not None, request=party_request(cfg))
            except BackendUnavailable as exc:
                where = b + (label or "")
                events.append({"backend": where, "reason": str(exc)})
                log.warning("backend %r not used: %s", where, exc)
                continue
            dev = ", ".join(inst.devices) or b
            members.append(CountingBackend(inst, device=f"{label} {dev}" if label else dev))
        if not members:
            if pos + 1 < len(chain):
                log.warning("falling back from %r to %r", name, chain[pos + 1])
            continue
        result: CountingBackend | MultiDeviceBackend
        if len(members) == 1:
            result = members[0]
        else:
            result = MultiDeviceBackend(members, make_executor(cfg.executor, len(members)))
        dispatch_note = None
        if cfg.dispatch.mode != "off":
            result, dispatch_note = with_dispatch(cfg, result, name)
        chain_rest = FallbackChain(result, chain[pos + 1:],
                                   lambda n: _start_fallback(cfg, n), start_events=events)
        result.selection = Selection(
            requested=cfg.backend, chosen=name, fallback_events=events, ranking=ranking,
            devices=result.devices, describe=result.describe(),
            runtime_fallbacks=chain_rest.events, executor=cfg.executor, dispatch=dispatch_note)
        if events:
            log.warning("party %s runs on %r instead of %r", cfg.party, name, cfg.backend)
        return result
    reasons = "; ".join(f"{e['backend']}: {e['reason']}" for e in events) or "no candidates"
    raise BackendUnavailable(f"no backend of the chain {chain} could start ({reasons})")
