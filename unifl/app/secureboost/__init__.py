"""Two-party hetero SecureBoost (Cheng et al. 2019; FLASH O6 histograms) for binary labels.

One concept per module: :mod:`.packing` (quantised gradients, packed plaintexts and histogram
cells), :mod:`.learner` (the guest's boosting over any source of host histograms), :mod:`.guard`
(the host's check of every query against its own view of the tree), :mod:`.protocol` (the two
parties over a channel; its docstring has the protocol and what each party learns).  The job
entry point is :func:`run`.
"""

from __future__ import annotations

from .protocol import run

__all__ = ["run"]
