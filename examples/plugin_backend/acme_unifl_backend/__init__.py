"""acme: a UniFL backend plug-in -- MontMult on Python integers; UniFL composes the rest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from unifl.core.backend import Backend, ProbeResult
from unifl.core.limbs import from_limbs, to_limbs
from unifl.core.montgomery import MontContext
from unifl.core.options import BackendOptions, option


@dataclass(frozen=True)
class AcmeOptions(BackendOptions):
    reduction: Literal["inverse", "redc"] = option(
        "inverse", "how a*b becomes a*b*R^-1 mod m: a product with R^-1 mod m, or REDC "
                   "(t + (t*m' mod R)*m) / R with m' = -m^-1 mod R")


class AcmeBackend(Backend):
    name = "acme"
    native_ops = frozenset({"mont_mul"})
    options_model = AcmeOptions
    options: AcmeOptions

    @classmethod
    def probe(cls) -> ProbeResult:
        return ProbeResult(True, "MontMult on Python integers", ["host CPU (Python ints)"])

    def op_mont_mul(self, ctx: MontContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        m, R = ctx.m, ctx.R
        if self.options.reduction == "inverse":
            r_inv = self.state.get(ctx, "r_inv", lambda: pow(R, -1, m))
            out = [x * y * r_inv % m for x, y in zip(from_limbs(a), from_limbs(b))]
        else:
            m_prime = self.state.get(ctx, "m_prime", lambda: -pow(m, -1, R) % R)
            shift = R.bit_length() - 1
            out = []
            for x, y in zip(from_limbs(a), from_limbs(b)):
                t = x * y
                r = (t + (t * m_prime & (R - 1)) * m) >> shift     # < 2m for a, b < m
                out.append(r - m if r >= m else r)
        return to_limbs(out, ctx.num_limbs)
