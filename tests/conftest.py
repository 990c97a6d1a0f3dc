"""Shared fixtures: the backends under test, cached keys, vector counts.

UNIFL_FULL=1 runs the full equivalence harness (>= 10^4 vectors per op per size); the default run
(CI) uses fewer for the slow ops, still covering every op, size and edge case.
"""

from __future__ import annotations

import functools
import os
import secrets
import threading

import pytest

import unifl
from unifl.core import registry

FULL = os.environ.get("UNIFL_FULL") == "1"

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


def random_odd_modulus(bits: int) -> int:
    return secrets.randbits(bits) | (1 << (bits - 1)) | 1


@functools.lru_cache(maxsize=None)
def paillier_keypair(bits: int):
    return unifl.keygen(bits)


@functools.lru_cache(maxsize=None)
def rsa_keypair(bits: int):
    return unifl.phe_sdk.rsa.keygen(bits)


@pytest.fixture(scope="session")
def pk_sk_1024():
    return paillier_keypair(1024)


@pytest.fixture(scope="session")
def pk_sk_2048():
    return paillier_keypair(2048)


class Party:
    """One party's real code in a thread, for tests that play the other party by hand; ``error`` /
    ``result`` once it has ended.  Like a party process, it closes its channel when it stops, so
    the attacker's next receive fails at once."""

    def __init__(self, fn, channel) -> None:
        self.result = self.error = None

        def target():
            try:
                self.result = fn()
            except BaseException as exc:  # noqa: BLE001 -- inspected by the test
                self.error = exc
            finally:
                channel.close()

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 30):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the party under attack hung"
        return self
