"""Shared fixtures: the backends under test, cached keys, vector counts.

UNIFL_FULL=1 runs the full equivalence harness (>= 10^4 vectors per op per size); the default run
(CI) uses fewer for the slow ops, still covering every op, size and edge case.
"""

from __future__ import annotations

import pytest

from unifl.core import registry

from tests.helpers.keys import FULL, paillier_keypair


# gpu backend: its CUDA kernel bodies compiled by the host C++ compiler and run on the CPU,
# registered here (test-only) so the equivalence harness checks them like any backend.  The real
# `gpu` backend probes unavailable without a CUDA driver/device and is never impersonated.
from unifl.backends.gpu.host import GpuHostBackend  # noqa: E402

registry.register("gpu_host", GpuHostBackend)


def pytest_report_header(config):
    lines = []
    for name in registry.names():
        pr = registry.probe(name)
        state = "available" if pr.available else "UNAVAILABLE"
        stand = f" [stand-in: {pr.stand_in}]" if pr.stand_in else ""
        lines.append(f"unifl backend {name}: {state}{stand} - {pr.reason}")
    lines.append(f"equivalence vectors: {'full (UNIFL_FULL=1)' if FULL else 'default'}")
    return lines


@pytest.fixture(scope="session")
def pk_sk_1024():
    return paillier_keypair(1024)


@pytest.fixture(scope="session")
def pk_sk_2048():
    return paillier_keypair(2048)
