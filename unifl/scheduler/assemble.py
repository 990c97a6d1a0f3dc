"""The entry point from a party's config to the Backend it computes on.

``executor: threads`` or ``serial``: the party's devices in this process
(:func:`unifl.scheduler.select.local_chain`).  ``executor: ray``: the party's batches split over the
worker actors of its own Ray cluster, with the chain of this process for the private-key ops and as
the last resort (:mod:`unifl.scheduler.ray`).  Ray is imported only for the latter, so a party that
does not use it needs neither the package nor the import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fallback import ChainMember
from .select import local_chain

if TYPE_CHECKING:
    from ..configs import PartyConfig


def backend_from_config(cfg: PartyConfig) -> ChainMember:
    """The Backend for party config ``cfg``; it counts and times every op per backend and device
    (``.report()``) and says what was chosen and why (``.selection``, a
    :class:`~unifl.scheduler.selection.Selection`; with Ray its ``ray`` says the cluster, the
    workers and the nodes they run on).

    Raises:
        ConfigError: a mistake in the config (for Ray also: no cluster at the address).
        BackendUnavailable: no backend of the chain could start (for Ray: no worker could).
    """
    backend: ChainMember
    if cfg.executor == "ray":
        from .ray import ray_backend
        backend = ray_backend(cfg)
    else:
        backend = local_chain(cfg)
    # the pools of work computed ahead (Paillier obfuscators) live in the state of the backend
    # the party computes on, bounded by its config
    backend.state.pool_limits = cfg.obfuscators.limits()
    return backend
