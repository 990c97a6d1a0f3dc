"""RSA blind-signature private set intersection (FLASH appendix C; UniFL Fig. 1; ops O7–O9).

Host (server) owns the RSA key (n, e, d); guest (client) holds ids A, host holds ids B.

1. host -> guest:  public key (n, e)
   guest -> host:  a fresh 32-byte nonce;  host -> guest: e-th roots of 8 values derived from it
   guest:          checks n has no prime factor below 2^20 and every root: x ↦ x^e is then a
                   permutation of Z_n* except with probability 65537^-8 < 2^-128
                   (:mod:`unifl.phe_sdk.rsa_proof`), so r^e is uniform and hides x perfectly
2. guest:          x_a = FDH(a) for a in A (each a unit mod n);
                   blinded b_a = x_a · r_a^e mod n                                     (O8, r_a secret)
   guest -> host:  [b_a]
3. host:           s_a = b_a^d = x_a^d · r_a mod n                                       (O7, CRT)
   host -> guest:  [s_a];  and  T = { H2(FDH(b)^d) : b in B }  (sorted digests)         (O7)
4. guest:          u_a = s_a · r_a^-1 = FDH(a)^d mod n, verified: u_a^e = FDH(a) mod n    (O9)
                   t_a = H2(u_a);  A ∩ B = { a : t_a in T }
   guest -> host:  the digests t_a of the intersection; the host maps them back to its ids.

The host never sees FDH(a) (blinded by a uniform r_a, which the key proof of step 1 guarantees
before any blinded value is sent); the guest learns only which of its own ids the host also has
(H2 of a signature it cannot forge).  Both end with the intersection as strings in the canonical
order of :func:`unifl.app.data.sorted_ids`.

Neither party trusts the other's messages: the guest accepts only e = 65537, a modulus of at
least its own key size that proves x ↦ x^e a permutation, and verifies every signature; the host
signs only values in (0, n), at most ``max_peer_ids`` of them, verifies each CRT signature before it
leaves (in :meth:`~unifl.phe_sdk.rsa.PrivateKey.raw_decrypt`), and accepts as the intersection only
distinct digests of its own ids, no more than the guest sent.  With ``max_ids`` declared in the
job, each refuses a peer entering more ids than declared (the host's digests, the guest's blinded
values).  A guest can still claim any subset of the host's ids it signed as "the intersection"
(nothing proves it matched them), and a host can enter any set of its declared size (ids it does
not hold included: inherent in PSI); see docs/app.md.
"""

from __future__ import annotations

import hashlib
import logging
import secrets

import numpy as np

from ..core.backend import Backend
from ..core.errors import ConfigError, ProtocolViolation, SignatureError, WeakKeyError
from ..phe_sdk import rsa, rsa_proof
from ..phe_sdk.rsa import full_domain_hash
from .channel import Channel
from .data import PartyData, load_party, sorted_ids
from .params import PsiParams, params_of
from .timing import Timings

DIGEST = 32

log = logging.getLogger("unifl.app.psi")

#: The most ids either party accepts from its peer in one PSI: blinded values (host), signatures and
#: host digests (guest).  2^22 ids are 128 MiB of digests and 1 GiB of 2048-bit values, above any
#: cross-silo id set we run and far below what would exhaust a party's memory; a count above it is
#: refused before any exponentiation.  Pass ``max_peer_ids`` to :func:`psi_guest` /
#: :func:`psi_host` to change it.
MAX_PEER_IDS = 1 << 22


def _h2(values: list[int], n: int) -> list[bytes]:
    """Second hash of the signatures (fixed-width big-endian bytes)."""
    width = (n.bit_length() + 7) // 8
    return [hashlib.sha256(b"unifl-psi-h2" + v.to_bytes(width, "big")).digest() for v in values]


def check_peer_key(pk: object, min_key_bits: int) -> rsa.PublicKey:
    """The host's RSA key, accepted only with e = 65537 and a modulus of at least ``min_key_bits``
    bits (the guest's own setting, never the host's claim): a small or odd e, or a short n, would
    let a hostile host pick a key that makes its "signatures" cheap to fake or invert."""
    if not isinstance(pk, rsa.PublicKey):
        raise ProtocolViolation(f"PSI: host sent a {type(pk).__name__} where an RSA public key "
                                "belongs")
    if pk.e != rsa.E:
        raise WeakKeyError(f"PSI: host RSA key has e = {pk.e}; only e = {rsa.E} is accepted")
    if pk.n.bit_length() < min_key_bits:
        raise WeakKeyError(f"PSI: host RSA modulus has {pk.n.bit_length()} bits, below this "
                           f"party's floor of {min_key_bits} bits")
    return pk


def verify_host_key(channel: Channel, pk: rsa.PublicKey, backend: Backend | None,
                    prefix: str = "psi") -> None:
    """The guest's check that the host's x ↦ x^e is a permutation of Z_n*, before any value that
    depends on an id is sent: a fresh nonce out, e-th roots of the values derived from it back
    (:func:`unifl.phe_sdk.rsa_proof.verify`, which also refuses a factor below 2^20).

    Raises:
        WeakKeyError, SignatureError: the host's key is not shown to blind perfectly.
    """
    rsa_proof.check_no_small_factor(pk.n)
    nonce = secrets.token_bytes(rsa_proof.NONCE_BYTES)
    channel.send("host", f"{prefix}/key_nonce", nonce)
    rsa_proof.verify(pk, nonce, channel.recv("host", f"{prefix}/key_proof"), backend)


def prove_key(channel: Channel, sk: rsa.PrivateKey, backend: Backend | None,
              prefix: str = "psi") -> None:
    """The host's answer to the guest's key challenge: exactly
    :data:`~unifl.phe_sdk.rsa_proof.CHALLENGES` e-th roots, whatever the guest asks (its nonce
    must be exactly 32 bytes)."""
    nonce = channel.recv("guest", f"{prefix}/key_nonce")
    if not isinstance(nonce, bytes) or len(nonce) != rsa_proof.NONCE_BYTES:
        raise ProtocolViolation(f"PSI: the guest's key challenge must be {rsa_proof.NONCE_BYTES} "
                                f"bytes, got {type(nonce).__name__} of "
                                f"{len(nonce) if isinstance(nonce, bytes) else '?'}")
    channel.send("guest", f"{prefix}/key_proof", rsa_proof.prove(sk, nonce, backend))


def _digest_list(blob: object, field: str, max_count: int) -> list[bytes]:
    """``blob`` (bytes from the peer) as its 32-byte digests; the count is checked before anything
    is split."""
    if not isinstance(blob, (bytes, bytearray)):
        raise ProtocolViolation(f"PSI: {field} must be bytes, got {type(blob).__name__}")
    if len(blob) % DIGEST:
        raise ProtocolViolation(f"PSI: {field} is {len(blob)} bytes, not a multiple of the "
                                f"{DIGEST}-byte digest")
    count = len(blob) // DIGEST
    if count > max_count:
        raise ProtocolViolation(f"PSI: {field} holds {count} digests, more than the limit of "
                                f"{max_count}")
    return [bytes(blob[i:i + DIGEST]) for i in range(0, len(blob), DIGEST)]


def psi_guest(channel: Channel, ids: list[str], backend: Backend | None,
              timings: Timings | None = None, prefix: str = "psi", *,
              min_key_bits: int = rsa.MIN_KEY_BITS, max_peer_ids: int = MAX_PEER_IDS) -> list[str]:
    """The client side: returns the intersection (canonical order).

    The host is not trusted: its key must have e = 65537 and at least ``min_key_bits`` bits
    (:class:`~unifl.core.errors.WeakKeyError`) and prove x ↦ x^e a permutation of Z_n* before any
    blinded id leaves (:func:`verify_host_key`), every count and value it sends is checked against
    this party's own state (:class:`~unifl.core.errors.ProtocolViolation`; its digests at most
    ``max_peer_ids``, the host's declared id count), and every unblinded signature must verify,
    u^e = FDH(id) mod n (:class:`~unifl.core.errors.SignatureError`): without that a host
    returning another function of the ids could make the guest compute a wrong intersection or
    probe which ids it holds.
    """
    t = timings or Timings()
    pk = check_peer_key(channel.recv("host", f"{prefix}/pk"), min_key_bits)
    with t.subtask("PSI: check host key (permutation proof)",
                   "trial division, RSA ModExp (8 e-th powers)"):
        with t.crypto():
            verify_host_key(channel, pk, backend, prefix)
    with t.subtask("PSI: hash & blind ids", "FDH, O8 blind (RSA ModExp r^e, ModMult)"):
        with t.crypto():
            hashed = full_domain_hash(ids, pk.n)
            rsa_proof.check_units(pk, hashed, "hashed id")
            blinded, rs = pk.blind(hashed, backend)
    channel.send("host", f"{prefix}/blinded", np.array(_ints_to_u64(blinded, pk.n)))
    signed_arr = channel.recv("host", f"{prefix}/signed")
    host_digests = channel.recv("host", f"{prefix}/host_digests")
    with t.subtask("PSI: unblind & match", "O9 unblind (ModMult by r^-1), verify (ModExp u^e), H2"):
        signed = _u64_to_ints(signed_arr, pk.n, len(ids), "signed values")
        for s in signed:
            if not 0 < s < pk.n:
                raise ProtocolViolation("PSI: host sent a signature outside [1, n)")
        theirs = set(_digest_list(host_digests, "host digests", max_peer_ids))
        with t.crypto():
            unblinded = pk.unblind(signed, rs, backend)
            check = pk.raw_encrypt(unblinded, backend)
        bad = sum(1 for c, x in zip(check, hashed) if c != x)
        if bad:
            raise SignatureError(f"PSI: {bad} of {len(ids)} signatures from the host do not "
                                 "verify (u^e != FDH(id) mod n)")
        mine = _h2(unblinded, pk.n)
        hits = [(d, i) for d, i in zip(mine, ids) if d in theirs]
    channel.send("host", f"{prefix}/result", b"".join(sorted({d for d, _ in hits})))
    return sorted_ids(i for _, i in hits)


def psi_host(channel: Channel, ids: list[str], backend: Backend | None,
             key_bits: int = rsa.DEFAULT_KEY_BITS,
             timings: Timings | None = None, prefix: str = "psi", *,
             max_peer_ids: int = MAX_PEER_IDS) -> list[str]:
    """The server side (owns the RSA key): returns the intersection (canonical order).

    The guest is not trusted: at most ``max_peer_ids`` blinded values, each in (0, n), are signed
    (checked before any exponentiation), and the intersection it reports must be distinct digests
    of the host's own ids, no more than it sent (:class:`~unifl.core.errors.ProtocolViolation`).  Every
    signature is verified by :meth:`unifl.phe_sdk.rsa.PrivateKey.raw_decrypt` before it leaves
    (a fault in one CRT half would hand the guest a factor of n).
    """
    t = timings or Timings()
    with t.subtask("PSI: RSA key generation", "RSA keygen"):
        with t.crypto():
            pk, sk = rsa.keygen(key_bits)
    channel.send("guest", f"{prefix}/pk", pk)
    with t.subtask("PSI: prove key (permutation proof)", "O7 RSA private op (CRT, 8 roots)"):
        prove_key(channel, sk, backend, prefix)
    with t.subtask("PSI: sign own ids", "FDH, O7 RSA private op (CRT), H2"):
        with t.crypto():
            own = sk.raw_decrypt(full_domain_hash(ids, pk.n), backend)
        digests = _h2(own, pk.n)
    by_digest = dict(zip(digests, ids))
    blinded_arr = channel.recv("guest", f"{prefix}/blinded")
    with t.subtask("PSI: sign guest's blinded ids", "O7 RSA private op (CRT)"):
        if isinstance(blinded_arr, np.ndarray) and blinded_arr.ndim and \
                blinded_arr.shape[0] > max_peer_ids:
            raise ProtocolViolation(f"PSI: guest sent {blinded_arr.shape[0]} blinded values, more "
                                    f"than the limit of {max_peer_ids}")
        blinded = _u64_to_ints(blinded_arr, pk.n, None, "blinded values")
        for b in blinded:
            if not 0 < b < pk.n:
                raise ProtocolViolation("PSI: blinded value outside (0, n)")
        with t.crypto():
            signed = sk.raw_decrypt(blinded, backend)
    channel.send("guest", f"{prefix}/signed", np.array(_ints_to_u64(signed, pk.n)))
    channel.send("guest", f"{prefix}/host_digests", b"".join(sorted(digests)))
    result = channel.recv("guest", f"{prefix}/result")
    # the guest can only have matched ids it sent, and each at most once
    reported = _digest_list(result, "intersection digests", min(len(blinded), len(by_digest)))
    if len(set(reported)) != len(reported):
        raise ProtocolViolation("PSI: guest reported the same intersection digest twice")
    inter = []
    for d in reported:
        if d not in by_digest:
            raise ProtocolViolation("PSI: guest reported an id the host does not have")
        inter.append(by_digest[d])
    return sorted_ids(inter)


def _ints_to_u64(values: list[int], n: int) -> np.ndarray:
    """Residues mod n as a (N, L) uint64 limb matrix (compact and codec-friendly)."""
    limbs = -(-n.bit_length() // 64)
    out = np.zeros((len(values), limbs), np.uint64)
    for r, v in enumerate(values):
        out[r] = np.frombuffer(int(v).to_bytes(8 * limbs, "little"), dtype="<u8")
    return out


def _u64_to_ints(arr: object, n: int, rows: int | None = None, field: str = "values") -> list[int]:
    """The peer's (N, L) limb matrix as ints; the shape (and N when ``rows`` is ours to know) is
    checked before any conversion."""
    limbs = -(-n.bit_length() // 64)
    if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.shape[1] != limbs or \
            arr.dtype != np.uint64:
        # np.shape takes any object at run time (a non-array's shape is ()); its stub lists only
        # array-likes, and ``arr`` is whatever the peer sent
        raise ProtocolViolation(f"PSI: {field}: expected a (N, {limbs}) uint64 array, got "
                                f"{np.shape(arr)} "  # type: ignore[call-overload]
                                f"{getattr(arr, 'dtype', type(arr).__name__)}")
    if rows is not None and arr.shape[0] != rows:
        raise ProtocolViolation(f"PSI: {field}: host sent {arr.shape[0]}, {rows} were sent to it")
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


def _psi_params(job: dict) -> PsiParams:
    p = params_of(job)
    if not isinstance(p, PsiParams):
        raise ConfigError(f"algorithm {job['algorithm']!r} has no PSI step")
    return p


def party_ids(role: str, job: dict, data_dir: str | None, data: PartyData | None = None
              ) -> list[str]:
    """This party's ids for a PSI job after the demo's dropping (params drop_fraction);
    ``data``: the party's file, when the caller has read it already."""
    ids = (data if data is not None else load_party(job["dataset"], role, data_dir)).ids
    return drop_ids(ids, _psi_params(job).drop_fraction, job["seed"], role)


def intersect(role: str, job: dict, channel: Channel, backend: Backend | None, ids: list[str],
              timings: Timings) -> list[str]:
    """Run the PSI for this role (guest = client, host = server).

    With ``max_ids`` declared, this party's own ids must not exceed its count (ConfigError) and
    the peer may enter at most its declared count (the host's digests, the guest's blinded values;
    ProtocolViolation): the sizes come from the job, not from the peer."""
    p = _psi_params(job)
    if role not in ("guest", "host"):
        raise ConfigError("PSI runs between guest and host only")
    peer = "host" if role == "guest" else "guest"
    # this party's own setting: the host's key size, and the guest's floor for the host's key
    bits = p.rsa_key_bits(job["key_bits"])
    limit = MAX_PEER_IDS
    if p.max_ids is not None:
        own_max, peer_max = getattr(p.max_ids, role), getattr(p.max_ids, peer)
        if len(ids) > own_max:
            raise ConfigError(f"PSI: {role} has {len(ids)} ids, the job declares at most "
                              f"{own_max} (params.max_ids.{role})")
        limit = min(limit, peer_max)
    else:
        log.warning("%s: the job declares no id counts (params.max_ids): the %s may enter up to "
                    "%d ids, ids it does not hold included", role, peer, MAX_PEER_IDS)
    if role == "guest":
        return psi_guest(channel, ids, backend, timings, min_key_bits=bits, max_peer_ids=limit)
    return psi_host(channel, ids, backend, bits, timings, max_peer_ids=limit)


def run(role: str, job: dict, channel: Channel, backend: Backend | None, *,
        data_dir: str | None = None, progress: bool = True) -> dict:
    """Job entry point for algorithm "psi"."""
    timings = Timings()
    if role == "arbiter":
        return {"role": role, "metrics": {}, "model": {}, "timings": [], "intersection_size": 0}
    ids = party_ids(role, job, data_dir)
    inter = intersect(role, job, channel, backend, ids, timings)
    return {"role": role, "metrics": {"own_ids": len(ids)}, "model": {},
            "timings": timings.rows(), "intersection_size": len(inter),
            "intersection_head": inter[:5]}
