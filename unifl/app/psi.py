"""RSA blind-signature private set intersection (FLASH appendix C; UniFL Fig. 1; ops O7–O9).

Host (server) owns the RSA key (n, e, d); guest (client) holds ids A, host holds ids B.

1. host -> guest:  public key (n, e)
2. guest:          x_a = FDH(a) for a in A;  blinded b_a = x_a · r_a^e mod n          (O8, r_a secret)
   guest -> host:  [b_a]
3. host:           s_a = b_a^d = x_a^d · r_a mod n                                       (O7, CRT)
   host -> guest:  [s_a];  and  T = { H2(FDH(b)^d) : b in B }  (sorted digests)         (O7)
4. guest:          u_a = s_a · r_a^-1 = FDH(a)^d mod n;  t_a = H2(u_a)                   (O9)
                   A ∩ B = { a : t_a in T }
   guest -> host:  the digests t_a of the intersection; the host maps them back to its ids.

The host never sees FDH(a) (blinded by a uniform r_a); the guest learns only which of its own ids the
host also has (H2 of a signature it cannot forge).  Both end with the intersection as strings in the
canonical order of :func:`unifl.app.data.sorted_ids`.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..errors import ConfigError, TransportError
from ..phe_sdk import rsa
from ..phe_sdk.rsa import full_domain_hash
from .channel import Channel
from .data import load_party, sorted_ids
from .timing import Timings

DIGEST = 32


def _h2(values: list[int], n: int) -> list[bytes]:
    """Second hash of the signatures (fixed-width big-endian bytes)."""
    width = (n.bit_length() + 7) // 8
    return [hashlib.sha256(b"unifl-psi-h2" + v.to_bytes(width, "big")).digest() for v in values]


def psi_guest(channel: Channel, ids: list[str], backend, timings: Timings | None = None,
              prefix: str = "psi") -> list[str]:
    """The client side: returns the intersection (canonical order)."""
    t = timings or Timings()
    pk = channel.recv("host", f"{prefix}/pk")
    if not isinstance(pk, rsa.PublicKey):
        raise TransportError("PSI: host did not send an RSA public key")
    with t.subtask("PSI: hash & blind ids", "FDH, O8 blind (RSA ModExp r^e, ModMult)"):
        with t.crypto():
            hashed = full_domain_hash(ids, pk.n)
            blinded, rs = pk.blind(hashed, backend)
    channel.send("host", f"{prefix}/blinded", np.array(_ints_to_u64(blinded, pk.n)))
    signed_arr = channel.recv("host", f"{prefix}/signed")
    host_digests = channel.recv("host", f"{prefix}/host_digests")
    with t.subtask("PSI: unblind & match", "O9 unblind (ModMult by r^-1), H2"):
        signed = _u64_to_ints(signed_arr, pk.n)
        if len(signed) != len(ids):
            raise TransportError(f"PSI: host signed {len(signed)} values, {len(ids)} were sent")
        with t.crypto():
            unblinded = pk.unblind(signed, rs, backend)
        mine = _h2(unblinded, pk.n)
        theirs = {bytes(host_digests[i:i + DIGEST]) for i in range(0, len(host_digests), DIGEST)}
        hits = [(d, i) for d, i in zip(mine, ids) if d in theirs]
    channel.send("host", f"{prefix}/result", b"".join(d for d, _ in sorted(hits)))
    return sorted_ids(i for _, i in hits)


def psi_host(channel: Channel, ids: list[str], backend, key_bits: int = rsa.DEFAULT_KEY_BITS,
             timings: Timings | None = None, prefix: str = "psi") -> list[str]:
    """The server side (owns the RSA key): returns the intersection (canonical order)."""
    t = timings or Timings()
    with t.subtask("PSI: RSA key generation", "RSA keygen"):
        with t.crypto():
            pk, sk = rsa.keygen(key_bits)
    channel.send("guest", f"{prefix}/pk", pk)
    with t.subtask("PSI: sign own ids", "FDH, O7 RSA private op (CRT), H2"):
        with t.crypto():
            own = sk.raw_decrypt(full_domain_hash(ids, pk.n), backend)
        digests = _h2(own, pk.n)
    by_digest = dict(zip(digests, ids))
    blinded_arr = channel.recv("guest", f"{prefix}/blinded")
    with t.subtask("PSI: sign guest's blinded ids", "O7 RSA private op (CRT)"):
        blinded = _u64_to_ints(blinded_arr, pk.n)
        for b in blinded:
            if not 0 < b < pk.n:
                raise TransportError("PSI: blinded value outside (0, n)")
        with t.crypto():
            signed = sk.raw_decrypt(blinded, backend)
    channel.send("guest", f"{prefix}/signed", np.array(_ints_to_u64(signed, pk.n)))
    channel.send("guest", f"{prefix}/host_digests", b"".join(sorted(digests)))
    result = channel.recv("guest", f"{prefix}/result")
    inter = []
    for i in range(0, len(result), DIGEST):
        d = bytes(result[i:i + DIGEST])
        if d not in by_digest:
            raise TransportError("PSI: guest reported an id the host does not have")
        inter.append(by_digest[d])
    return sorted_ids(inter)


def _ints_to_u64(values: list[int], n: int) -> np.ndarray:
    """Residues mod n as a (N, L) uint64 limb matrix (compact and codec-friendly)."""
    limbs = -(-n.bit_length() // 64)
    out = np.zeros((len(values), limbs), np.uint64)
    for r, v in enumerate(values):
        out[r] = np.frombuffer(int(v).to_bytes(8 * limbs, "little"), dtype="<u8")
    return out


def _u64_to_ints(arr, n: int) -> list[int]:
    arr = np.asarray(arr)
    limbs = -(-n.bit_length() // 64)
    if arr.ndim != 2 or arr.shape[1] != limbs or arr.dtype != np.uint64:
        raise TransportError(f"PSI: expected a (N, {limbs}) uint64 array, got {arr.shape} "
                             f"{arr.dtype}")
    return [int.from_bytes(row.astype("<u8").tobytes(), "little") for row in arr]


def plain_intersection(a: list[str], b: list[str]) -> list[str]:
    """The reference: A ∩ B in the canonical order."""
    return sorted_ids(set(a) & set(b))


def drop_ids(ids: list[str], fraction: float, seed: int, role: str) -> list[str]:
    """``ids`` minus a seeded ``fraction`` of them (different per role), so that a demo intersection
    is a real one; order kept."""
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"drop_fraction must lie in [0, 1), got {fraction}")
    k = int(round(len(ids) * fraction))
    if k == 0:
        return list(ids)
    salt = {"guest": 1, "host": 2}.get(role, 3)
    drop = set(np.random.default_rng([seed, salt]).choice(len(ids), k, replace=False).tolist())
    return [x for i, x in enumerate(ids) if i not in drop]


def party_ids(role: str, job: dict, data_dir: str | None) -> list[str]:
    """This party's ids for a PSI job after the demo's dropping (params drop_fraction, default 0)."""
    ids = load_party(job["dataset"], role, data_dir).ids
    frac = float(job["params"].get("drop_fraction", 0.0))
    return drop_ids(ids, frac, job["seed"], role)


def intersect(role: str, job: dict, channel: Channel, backend, ids: list[str],
              timings: Timings) -> list[str]:
    """Run the PSI for this role (guest = client, host = server)."""
    bits = int(job["params"].get("rsa_bits", job.get("key_bits", rsa.DEFAULT_KEY_BITS)))
    if role == "guest":
        return psi_guest(channel, ids, backend, timings)
    if role == "host":
        return psi_host(channel, ids, backend, bits, timings)
    raise ConfigError("PSI runs between guest and host only")


def run(role: str, job: dict, channel: Channel, backend, *, data_dir: str | None = None,
        progress: bool = True) -> dict:
    """Job entry point for algorithm "psi"."""
    timings = Timings()
    if role == "arbiter":
        return {"role": role, "metrics": {}, "model": {}, "timings": [], "intersection_size": 0}
    ids = party_ids(role, job, data_dir)
    inter = intersect(role, job, channel, backend, ids, timings)
    return {"role": role, "metrics": {"own_ids": len(ids)}, "model": {},
            "timings": timings.rows(), "intersection_size": len(inter),
            "intersection_head": inter[:5]}
