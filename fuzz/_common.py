"""Shared pieces of the coverage-guided fuzz harnesses (atheris + libFuzzer).

Every harness is ``fuzz/fuzz_<target>.py``: a function of bytes that feeds one parser of peer or user
input and accepts only UniFL's typed errors (:class:`unifl.core.errors.UniflError` subclasses) as the
expected outcome of bad input.  Anything else -- another exception, a hang past ``-timeout=``, RSS
past ``-rss_limit_mb=`` -- propagates to libFuzzer, which reports it as a crash and writes the input
to ``-artifact_prefix=``.

Seed corpora are generated at run time (real frames, keys, messages, the shipped example YAMLs), so
no binary blobs live in the repository.  Run one harness by hand::

    .venv/bin/python fuzz/fuzz_frame.py -runs=2000          # seeds go to a fresh dir in build/fuzz
    .venv/bin/python fuzz/fuzz_frame.py build/fuzz/crash-…  # replay one input

or all of them with ``make fuzz`` (``fuzz/run.py``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

import atheris

# A harness imports this module and its targets inside ``atheris.instrument_imports(...)`` before
# anything else imports unifl, so UniFL's modules are instrumented for coverage.
from unifl.core.errors import UniflError
from unifl.phe_sdk import paillier, rsa

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "build" / "fuzz"

#: the only exceptions bad input may raise; everything else is a crash
EXPECTED: tuple[type[BaseException], ...] = (UniflError,)

# A fixed 1024-bit test key (never a real secret): p, q = next_prime(SHA-512(tag) | top bits | 1)
# for tags b"unifl-fuzz-p" and b"unifl-fuzz-q", written out so a harness starts in milliseconds
# instead of generating primes, and so crash inputs replay against the same key.
P = int("dab5fb1614b93b7bb4e288b824a1c3dc35dc818536e82e49a91b310d043e1836"
        "3bef829ad40f033507e4ba4f7a1feba1eeed15b02a15416df2ed957af1c97235", 16)
Q = int("e385a13330816b2cfbeed12e553f7ad86d815818ce299ec25033b5b9e186ee5e"
        "2da61c5bc9f10fe56abf104cdc1cb8905e8853c42dc84f45cc453655ee6584ff", 16)
E = 65537


def paillier_keys() -> tuple["paillier.PublicKey", "paillier.PrivateKey"]:
    """The fixed 1024-bit Paillier test key pair."""
    sk = paillier.PrivateKey(P, Q)
    return sk.public_key, sk


def rsa_keys() -> tuple["rsa.PublicKey", "rsa.PrivateKey"]:
    """The fixed 1024-bit RSA test key pair (same primes, e = 65537)."""
    sk = rsa.PrivateKey(P, Q, E)
    return sk.public_key, sk


def _has_corpus_arg(argv: list[str]) -> bool:
    return any(not a.startswith("-") for a in argv[1:])


def main(test_one: Callable[[bytes], None], seeds: Callable[[], Iterable[bytes]],
         default_flags: Iterable[str] = ()) -> None:
    """Run ``test_one`` under libFuzzer.

    Seeds: when the command line names no corpus directory, a fresh one under ``build/fuzz`` is made
    and filled with ``seeds()``; a named corpus directory that is empty is filled too (``fuzz/run.py``
    passes a temporary one).  A named *file* is replayed as usual.  ``default_flags`` (per-input
    timeout, RSS limit, max length) apply unless the command line sets the same flag.
    """
    argv = list(sys.argv)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = Path(argv[0]).stem
    flags = {"-timeout=10", "-rss_limit_mb=2048", f"-artifact_prefix={ARTIFACTS}/{name}-",
             *default_flags}
    given = {a.split("=", 1)[0] for a in argv[1:] if a.startswith("-")}
    argv += sorted(f for f in flags if f.split("=", 1)[0] not in given)
    if not _has_corpus_arg(argv):
        argv.append(tempfile.mkdtemp(prefix=f"{name}-corpus-", dir=ARTIFACTS))
    for arg in argv[1:]:
        if not arg.startswith("-") and os.path.isdir(arg) and not os.listdir(arg):
            for i, seed in enumerate(seeds()):
                Path(arg, f"seed-{i:04d}").write_bytes(seed)
    atheris.Setup(argv, test_one)
    atheris.Fuzz()
