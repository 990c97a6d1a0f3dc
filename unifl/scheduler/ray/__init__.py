"""One party's crypto on its own Ray cluster (``executor: ray`` in the party's YAML).

Each worker is a Ray actor holding its own backend chain, built on its node from the party's
config (:mod:`.worker`), so device state stays on the worker.  The party's process splits every
batch over the workers by the multi-device rules (:mod:`unifl.scheduler.multi`), ships the pieces
as NumPy limb arrays through the object store and the contexts and key records once each by handle
(:mod:`.shipping`), and puts the results back in order: bit-identical to one device.  The ops on
the party's private key stay in its process unless the party ships them on purpose; a lost worker's
piece is re-run on another; with none left the party's own chain computes (:mod:`.backend`).
Joining the cluster and starting the workers are bounded in time (:mod:`.cluster`, :mod:`.start`).

Ray is optional (``pip install 'unifl[ray]'``); only this package imports it, and only when a party
asks for it.  docs/scale.md has the deployment (``ray start``), what crosses the network, and the
measured overhead and scale model.
"""

from .backend import RayBackend
from .proxy import RayWorkerLost
from .start import ray_backend

__all__ = ["RayBackend", "RayWorkerLost", "ray_backend"]
