"""Options of the ``qat`` backend: one definition, parsed by ``QatBackend(**options)`` and by a
party's ``qat:`` YAML section alike (:class:`unifl.core.options.BackendOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Union

from ...core.options import BackendOptions, option


@dataclass(frozen=True)
class QatOptions(BackendOptions):
    """Which QAT library and instances, how deep the request window, how much work the CPU takes."""

    library: Optional[str] = option(
        None, "path or soname of libqat, or 'simulator'; null: env UNIFL_QAT_LIBRARY, else libqat "
              "when installed, else our simulator library (same C ABI)")
    instances: Union[Literal["all"], int] = option(
        "all", "'all', or how many crypto instances to use", ge=1)
    max_in_flight: int = option(
        96, "outstanding requests per instance (HE-QAT's 96)", ge=1)
    cpu_share: float = option(
        0.0, "fraction in [0, 1) of the ModExps computed on the CPU beside the card", ge=0.0, lt=1.0)
    simulator: Optional[bool] = option(
        None, "allow the simulator when no card is present; null: env UNIFL_QAT_SIMULATOR "
              "(0 forbids), else yes")
    section: Optional[str] = option(
        None, "process section of the QAT configuration file; null: env UNIFL_QAT_SECTION, "
              "else SSL")
    matmul_on_qat: bool = option(
        False, "Alg. 7: the ciphertext x plaintext matmul as K*N ModExps on the card (else the "
               "CPU's multi-exponentiation)")
