"""Tutorial 1: encrypt, compute on ciphertexts, decrypt -- on whichever backend this machine has.

Run:  python examples/01_encrypt_and_compute.py [--backend native] [--key-bits 2048]

What it shows, in the order a newcomer meets it:

1. Keys.  ``unifl.keygen(bits)`` makes a Paillier key pair from the OS CSPRNG.  Paillier with g = n + 1
   encrypts an integer m < n as  c = (1 + m·n) · r^n  mod n²  with a fresh random unit r: the same m
   encrypts to a different c every time, and only the holder of the factorisation n = p·q decrypts.
2. Fixed point.  FL works with floats; an ``EncryptedArray`` carries an explicit scale (2^-24 by
   default), so 1.5 is encrypted as round(1.5·2^24), negatives in the centred range (n/2, n).  Every
   operation that can grow a value checks it against the overflow bound (``EncodingOverflowError``).
3. Homomorphic operations.  Enc(a)·Enc(b) = Enc(a + b) and Enc(a)^k = Enc(k·a), so on ciphertexts
   ``x + y``, ``x * k``, ``x @ W`` (a multi-exponentiation per output) and ``x.sum()`` need no key.
4. Backends.  The same calls run on ``cpu`` (gmpy2, the reference), ``native`` (our C++), or a device
   backend (gpu, qat, fpga, or the stand-in that answers for one here); every backend is bit-identical
   to ``cpu``.  ``unifl devices`` lists what this machine has.
5. The wire.  ``unifl.dumps`` writes a versioned binary frame (key fingerprint, scale, shape, limbs,
   CRC): no pickle.  ``unifl.loads`` checks it against the key you expect, and every ciphertext is
   checked to be a unit mod n² before anything uses it.
"""

from __future__ import annotations

import argparse

import numpy as np

import unifl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None, help="a registered backend (default: native if built)")
    ap.add_argument("--key-bits", type=int, default=2048)
    args = ap.parse_args()

    print("backends available here:", ", ".join(unifl.available_backends()))
    be = unifl.backend(args.backend)
    print(f"computing on: {be.describe() if hasattr(be, 'describe') else be.name}")

    pk, sk = unifl.keygen(args.key_bits)
    x = np.array([1.5, -2.0, 3.25])
    ex = unifl.EncryptedArray.encrypt(pk, x, backend=be)

    y = (ex + ex) * np.array([2, -1, 4]) + 1.0          # 2x·k + 1, on ciphertexts
    print("(x + x) * [2, -1, 4] + 1 =", y.decrypt(sk), " expected", (x + x) * [2, -1, 4] + 1)

    w = np.random.default_rng(0).normal(size=(3, 4))      # demo data; keys come from the OS CSPRNG
    print("x @ W                    =", np.round((ex @ w).decrypt(sk), 6))
    print("expected                 =", np.round(x @ w, 6))
    print("sum(x)                   =", ex.sum().decrypt(sk))

    frame = unifl.dumps(ex)                               # what a party sends its peer
    back = unifl.loads(frame, public_key=pk)              # refused if it is for another key
    print(f"frame: {len(frame)} bytes for {x.size} ciphertexts; round trip exact:",
          bool((back.decrypt(sk) == x).all()))


if __name__ == "__main__":
    main()
