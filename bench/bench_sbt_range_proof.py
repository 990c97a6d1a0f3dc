"""What a zero-knowledge range proof per packed SecureBoost slot would cost, measured.

    python bench/bench_sbt_range_proof.py [--bits 2048] [--rows 64] [--reps 3] [--json F]
        [--data-dir DIR] [--skip-jobs]

A malicious guest reads the host's binned matrix by encrypting chosen values in place of
[[ĝ + 2^64·ĥ]] (tests/attacks/test_sbt_guest.py).  The obvious constraint is a proof, per row and
tree, that ĝ ∈ [−2^s, 2^s] and ĥ ∈ [0, 2^(s−2)] (s = scale_bits = 24).  It has to be *tight*: a
range proof with slack (Paillier sigma protocols in the style of CGGMP's Π^enc) only shows
|m| < 2^(ℓ+ε) with ε ≈ 2^128-size slack, above the 99-bit histogram cell, so it bounds nothing
here.  The tight proof measured: bit decomposition.  The guest encrypts each bit b_k of
ĝ + 2^s (s + 2 bits) and of ĥ (s − 1 bits) and proves each ciphertext encrypts 0 or 1 (an OR of
two proofs that c·g^-j is an n-th power, Cramer–Damgård–Schoenmakers, with a 128-bit challenge
from ``secrets`` split between the branches); the host checks the bit proofs and that
∏ c_k^(2^k) equals the row's ciphertext homomorphically.  This file implements that proof for
real (an honest proof verifies, a flipped one does not: checked at every run) and times it:

* per row, in one process: the guest's proof (its n-th powers by the CRT, as its encryptions),
  the host's verification, against the key owner's encryption of the row the job does today
  (``cpu`` backend: gmpy2, single thread, like the proof's gmpy2 arithmetic; and ``native``);
* per job: the SecureBoost job itself (breast, and default_credit capped at ``--dc-rows`` rows,
  native backend, 1024/2048-bit keys as ``--bits``) timed in the same process, and the proof's
  added work projected from the per-row costs (one proof per row per tree: n_trees × rows).

Even tight, the proof would not stop the attack: with every slot in range the same trick reads
48 rows per histogram, and four trees' root, depth-1 and depth-2 histograms cover breast
(tests/attacks/test_sbt_guest.py::test_in_range_slots_still_read_the_binned_matrix).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np

import unifl
from unifl.app.jobs import run_local
from unifl.phe_sdk import EncryptedArray, paillier

ROOT = Path(__file__).resolve().parents[1]

SCALE = 24
G_BITS = SCALE + 2          # ĝ + 2^s in [0, 2^(s+1)]
H_BITS = SCALE - 1          # ĥ in [0, 2^(s−2)]
CHALLENGE_BITS = 128


class BitProver:
    """The guest (key owner): encrypts bits and proves each is 0 or 1, n-th powers by the CRT."""

    def __init__(self, sk: paillier.PrivateKey) -> None:
        self.sk = sk
        self.n = sk.public_key.n
        self.n2 = self.n * self.n
        p, q = sk.p, sk.q
        self.p2, self.q2 = p * p, q * q
        self.ep, self.eq = self.n % (p * (p - 1)), self.n % (q * (q - 1))
        self.pinv = int(gmpy2.invert(self.p2, self.q2))

    def nth_power(self, r: int) -> int:
        """r^n mod n² by the CRT (what the key owner's encryption does)."""
        xp = gmpy2.powmod(r, self.ep, self.p2)
        xq = gmpy2.powmod(r, self.eq, self.q2)
        return int(xp + self.p2 * ((xq - xp) * self.pinv % self.q2))

    def encrypt(self, m: int) -> tuple[int, int]:
        r = secrets.randbelow(self.n - 1) + 1
        return (1 + m * self.n) * self.nth_power(r) % self.n2, r

    def commit(self, b: int, r: int, c: int) -> dict[str, Any]:
        """First move of the OR proof: the true branch b honestly, the other simulated."""
        n, n2 = self.n, self.n2
        rho = secrets.randbelow(n - 1) + 1
        fake_e = secrets.randbits(CHALLENGE_BITS)
        fake_z = secrets.randbelow(n - 1) + 1
        u_fake = c * gmpy2.invert(1 + (1 - b) * n, n2) % n2        # c·g^-(1−b)
        a_fake = self.nth_power(fake_z) * gmpy2.invert(gmpy2.powmod(u_fake, fake_e, n2), n2) % n2
        a = [0, 0]
        a[b], a[1 - b] = self.nth_power(rho), int(a_fake)
        return {"a": a, "b": b, "r": r, "rho": rho, "fake_e": fake_e, "fake_z": fake_z}

    def respond(self, st: dict[str, Any], e: int) -> tuple[list[int], list[int]]:
        b = st["b"]
        e_real = (e - st["fake_e"]) % (1 << CHALLENGE_BITS)
        z_real = st["rho"] * gmpy2.powmod(st["r"], e_real, self.n) % self.n
        es, zs = [0, 0], [0, 0]
        es[b], es[1 - b] = e_real, st["fake_e"]
        zs[b], zs[1 - b] = int(z_real), st["fake_z"]
        return es, zs


def verify_bit(n: int, c: int, a: list[int], e: int, es: list[int], zs: list[int]) -> bool:
    """The host's check of one bit proof: e0 + e1 = e, z_j^n = a_j·(c·g^-j)^e_j mod n²."""
    n2 = n * n
    if (es[0] + es[1]) % (1 << CHALLENGE_BITS) != e:
        return False
    for j in (0, 1):
        u = c * gmpy2.invert(1 + j * n, n2) % n2
        if gmpy2.powmod(zs[j], n, n2) != a[j] * gmpy2.powmod(u, es[j], n2) % n2:
            return False
    return True


WEIGHTS = [1 << k for k in range(G_BITS)] + [1 << (64 + k) for k in range(H_BITS)]


def prove_row(prover: BitProver, g: int, h: int, row: tuple[int, int]) -> dict[str, Any]:
    """The proof for one row whose ciphertext and randomness are ``row`` = (c, r0): bit
    ciphertexts of ĝ + 2^s and ĥ with their OR proofs (one challenge for the row from the
    verifier's ``secrets``: the protocol is interactive), and the n-th root w that shows
    c·g^(2^s) / ∏ c_k^(weight_k) encrypts 0 (w = r0 / ∏ r_k^(weight_k) mod n)."""
    bits = [(g + (1 << SCALE)) >> k & 1 for k in range(G_BITS)] + \
        [h >> k & 1 for k in range(H_BITS)]
    cts, states = [], []
    for b in bits:
        c, r = prover.encrypt(b)
        cts.append(c)
        states.append(prover.commit(b, r, c))
    e = secrets.randbits(CHALLENGE_BITS)                     # the host's challenge
    n = prover.n
    rr = 1
    for st, wk in zip(states, WEIGHTS):
        rr = rr * gmpy2.powmod(st["r"], wk, n) % n
    w = int(row[1] * gmpy2.invert(rr, n) % n)
    return {"c": cts, "a": [s["a"] for s in states], "e": e,
            "resp": [prover.respond(s, e) for s in states], "w": w}


def verify_row(n: int, proof: dict[str, Any], row_ct: int) -> bool:
    """Every bit proof, and the link to the row: w^n ≡ c·g^(2^s)·(∏ c_k^(weight_k))^-1 (mod n²),
    i.e. the row encrypts Σ weight_k·b_k − 2^s = ĝ + 2^64·ĥ with both slots in range."""
    if not all(verify_bit(n, c, a, proof["e"], es, zs)
               for c, a, (es, zs) in zip(proof["c"], proof["a"], proof["resp"])):
        return False
    n2 = n * n
    acc = 1
    for c, wk in zip(proof["c"], WEIGHTS):
        acc = acc * gmpy2.powmod(c, wk, n2) % n2
    lhs = gmpy2.powmod(proof["w"], n, n2)
    rhs = row_ct * (1 + (1 << SCALE) * n) % n2 * gmpy2.invert(acc, n2) % n2
    return bool(lhs == rhs)


def per_row_costs(bits: int, rows: int, reps: int) -> dict[str, Any]:
    pk, sk = paillier.keygen(bits)
    prover = BitProver(sk)
    rng = np.random.default_rng(1)
    gs = rng.integers(-(1 << SCALE), 1 << SCALE, rows)
    hs = rng.integers(0, 1 << (SCALE - 2), rows)
    packed = [int(g) + (int(h) << 64) for g, h in zip(gs, hs)]
    # the rows' own ciphertexts (the job makes them anyway: not timed as the proof's)
    row_cts = [prover.encrypt(m % pk.n) for m in packed]
    # correctness first: an honest proof verifies; a flipped response, a bit of 2, or a row
    # outside the range do not
    sample = prove_row(prover, int(gs[0]), int(hs[0]), row_cts[0])
    assert verify_row(pk.n, sample, row_cts[0][0])
    bad = json.loads(json.dumps(sample))
    bad["resp"][0][1][0] = (bad["resp"][0][1][0] * 2) % pk.n
    assert not verify_row(pk.n, bad, row_cts[0][0])
    assert not verify_row(pk.n, sample, row_cts[1][0])          # another row's ciphertext
    out: dict[str, list[float]] = {"prove": [], "verify": [], "enc_cpu": [], "enc_native": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        proofs = [prove_row(prover, int(g), int(h), rc) for g, h, rc in zip(gs, hs, row_cts)]
        out["prove"].append((time.perf_counter() - t0) / rows)
        t0 = time.perf_counter()
        assert all(verify_row(pk.n, pr, rc[0]) for pr, rc in zip(proofs, row_cts))
        out["verify"].append((time.perf_counter() - t0) / rows)
        for name in ("cpu", "native"):
            be = unifl.backend(name)
            t0 = time.perf_counter()
            EncryptedArray.encrypt(pk, np.array(packed, dtype=object), backend=be, private_key=sk)
            out[f"enc_{name}"].append((time.perf_counter() - t0) / rows)
    med = {k: statistics.median(v) for k, v in out.items()}
    return {"bits": bits, "rows_timed": rows, "seconds_per_row": med,
            "prove_over_enc_cpu": med["prove"] / med["enc_cpu"],
            "verify_over_enc_cpu": med["verify"] / med["enc_cpu"],
            "bit_proofs_per_row": G_BITS + H_BITS}


def job_costs(bits: int, data_dir: str | None, dc_rows: int, per_row: dict[str, Any]
              ) -> list[dict[str, Any]]:
    be = unifl.backend("native")
    out = []
    for dataset, max_rows in (("breast", None), ("default_credit", dc_rows)):
        job = {"job_id": "sbt-cost", "algorithm": "secureboost", "dataset": dataset,
               "key_bits": bits, "params": {"max_rows": max_rows}}
        t0 = time.perf_counter()
        res = run_local(job, be, data_dir=data_dir, timeout=3600)
        wall = time.perf_counter() - t0
        rows = res["guest"]["metrics"]["train_rows"]
        trees = res["guest"]["metrics"]["trees"]
        s = per_row["seconds_per_row"]
        # the proofs on gmpy2 (one thread) scaled to native by the encryption's own ratio
        speed = s["enc_native"] / s["enc_cpu"]
        added = trees * rows * (s["prove"] + s["verify"]) * speed
        out.append({"dataset": dataset, "max_rows": max_rows, "train_rows": rows, "trees": trees,
                    "job_seconds": wall, "proof_seconds_projected": added,
                    "job_ratio_with_proofs": (wall + added) / wall})
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--rows", type=int, default=64, help="rows proved per timing repetition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--dc-rows", type=int, default=2000,
                    help="default_credit rows for the timed job (the projection is linear)")
    ap.add_argument("--skip-jobs", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    per_row = per_row_costs(args.bits, args.rows, args.reps)
    result: dict[str, Any] = {"per_row": per_row}
    print(json.dumps(per_row, indent=1))
    if not args.skip_jobs:
        result["jobs"] = job_costs(args.bits, args.data_dir, args.dc_rows, per_row)
        print(json.dumps(result["jobs"], indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
