"""PSI against a host whose RSA key does not blind, and a host that pads its set.

A host whose modulus has a prime p ≡ 1 (mod e) passes every check on the key's form (e = 65537,
size), but r ↦ r^e is then e-to-1 mod p: b^((p−1)/e) ≡ FDH(id)^((p−1)/e) (mod p) for every
blinded b, one of 65537 classes per id, so a host with no ids of its own names most of the guest's
ids from a known universe.  The guest now has the host prove x ↦ x^e a permutation (e-th roots of
values hashed from a fresh nonce) and refuses a modulus with a factor below 2^20, before any
blinded id leaves.  A host can also pad its digest list with ids it does not hold (it signs
anything) and learn whether the guest has them; with ``max_ids`` declared the guest refuses more
digests than the host's declared count.
"""

from __future__ import annotations

import secrets

import gmpy2
import numpy as np
import pytest

import unifl
from unifl.app import psi
from unifl.app.channel import Channel, local_transports
from unifl.app.data import load_party
from unifl.app.jobs import validate_job
from unifl.app.timing import Timings
from unifl.core.errors import (ConfigError, ProtocolViolation, SignatureError, TransportError,
                               WeakKeyError)
from unifl.phe_sdk import rsa, rsa_proof
from unifl.phe_sdk.rsa import E, full_domain_hash

from tests.helpers.party import Party

BE = unifl.backend("native")
BITS = 1024
UNIVERSE = load_party("breast", "host").ids                     # 569 ids the attacker knows of
GUEST_IDS = psi.drop_ids(load_party("breast", "guest").ids, 0.05, 42, "guest")


def prime_one_mod_e(bits: int) -> int:
    """A prime p of ``bits`` bits with p ≡ 1 (mod e)."""
    while True:
        k = (secrets.randbits(bits - 16) | (1 << (bits - 17))) & ~1     # even: p odd
        p = 1 + E * k
        if p.bit_length() == bits and gmpy2.is_prime(p, 30):
            return p


@pytest.fixture(scope="module")
def trap_key():
    """(n, p): n = p·q of BITS bits with p ≡ 1 (mod e); q an ordinary prime."""
    p = prime_one_mod_e(BITS // 2)
    while True:
        q = int(gmpy2.next_prime(secrets.randbits(BITS // 2) | (1 << (BITS // 2 - 1))))
        if (p * q).bit_length() == BITS and (q - 1) % E:
            return p * q, p


def pair():
    t = local_transports()
    return Channel(t["guest"], 5.0, BE), Channel(t["host"], 5.0, BE)


def read_ids(blinded: list[int], n: int, p: int) -> dict[int, str]:
    """The attack: the e-th power residue class of each blinded value mod p, matched against the
    classes of the universe's hashed ids; {position: id} where the class is unique."""
    n_classes = (p - 1) // E
    classes: dict[int, list[str]] = {}
    for cid, x in zip(UNIVERSE, full_domain_hash(UNIVERSE, n)):
        classes.setdefault(pow(x % p, n_classes, p), []).append(cid)
    out = {}
    for i, b in enumerate(blinded):
        hit = classes.get(pow(b % p, n_classes, p), [])
        if len(hit) == 1:
            out[i] = hit[0]
    return out


def trap_host(h: Channel, n: int, answer_proof: bool) -> list[int] | None:
    """The hostile host: sends (n, e); if asked, answers the key challenge as best it can (it has
    no e-th roots of non-residues: it returns the challenges themselves); returns the blinded
    values it gets, or None when the guest sends none."""
    h.send("guest", "psi/pk", rsa.PublicKey(n, E))
    if answer_proof:
        nonce = h.recv("guest", "psi/key_nonce")
        rho = rsa_proof.challenges(rsa.PublicKey(n, E), nonce)
        h.send("guest", "psi/key_proof", rho)
    try:
        arr = h.recv("guest", "psi/blinded", timeout=1.0)
    except TransportError:
        return None
    limbs = -(-n.bit_length() // 64)
    return [int.from_bytes(np.asarray(r, "<u8").tobytes(), "little")
            for r in np.asarray(arr).reshape(-1, limbs)]


def test_the_trap_key_passes_the_checks_on_its_form(trap_key):
    n, p = trap_key
    pk = psi.check_peer_key(rsa.PublicKey(n, E), BITS)
    assert pk.e == E and pk.n.bit_length() == BITS and (p - 1) % E == 0


def test_without_the_proof_the_host_reads_the_guest_ids(trap_key, monkeypatch):
    """The control: the guest's code path with the key proof switched off (today's order: blind
    right after the key arrives) hands the host the ids."""
    n, p = trap_key
    monkeypatch.setattr(psi, "verify_host_key", lambda *a, **k: None)
    g, h = pair()
    guest = Party(lambda: psi.psi_guest(g, GUEST_IDS, BE), g)
    blinded = trap_host(h, n, answer_proof=False)
    h.close()
    guest.join()
    assert blinded is not None and len(blinded) == len(GUEST_IDS)
    named = read_ids(blinded, n, p)
    assert all(GUEST_IDS[i] == cid for i, cid in named.items())         # none wrong
    assert len(named) >= 0.9 * len(GUEST_IDS)                           # most of them


def test_the_guest_refuses_the_trap_key_before_any_blinded_id_leaves(trap_key):
    n, _ = trap_key
    g, h = pair()
    guest = Party(lambda: psi.psi_guest(g, GUEST_IDS, BE), g)
    blinded = trap_host(h, n, answer_proof=True)
    guest.join()
    assert blinded is None
    assert isinstance(guest.error, SignatureError) and "permutation" in str(guest.error)


def test_the_guest_refuses_a_small_factor_before_the_challenge(trap_key):
    """n = 1000003 · q': refused by trial division, nothing sent at all."""
    small = 1000003
    while True:
        q = int(gmpy2.next_prime(secrets.randbits(BITS - 20) | (1 << (BITS - 21))))
        if (small * q).bit_length() == BITS:
            break
    g, h = pair()
    guest = Party(lambda: psi.psi_guest(g, GUEST_IDS, BE), g)
    h.send("guest", "psi/pk", rsa.PublicKey(small * q, E))
    guest.join()
    assert isinstance(guest.error, WeakKeyError) and "1000003" in str(guest.error)
    with pytest.raises(TransportError):
        h.recv("guest", "psi/key_nonce", timeout=0.3)


def test_an_honest_key_proves_and_a_wrong_answer_fails():
    pk, sk = rsa.keygen(BITS)
    nonce = secrets.token_bytes(rsa_proof.NONCE_BYTES)
    proof = rsa_proof.prove(sk, nonce, BE)
    rsa_proof.verify(pk, nonce, proof, BE)
    with pytest.raises(SignatureError):                  # roots of another nonce
        rsa_proof.verify(pk, secrets.token_bytes(32), proof, BE)
    for bad in (proof[:-1], proof + [1], [0] + proof[1:], [pk.n] + proof[1:], tuple(proof),
                [True] + proof[1:]):
        with pytest.raises(SignatureError):
            rsa_proof.verify(pk, nonce, bad, BE)
    with pytest.raises(WeakKeyError):                    # a challenge sharing a factor with n
        rsa_proof.check_units(pk, [5, sk.p * 7], "value")


def test_the_host_answers_only_a_32_byte_nonce():
    g, h = pair()
    host = Party(lambda: psi.psi_host(h, ["a", "b"], BE, key_bits=BITS), h)
    g.recv("host", "psi/pk")
    g.send("host", "psi/key_nonce", b"x" * 10 ** 6)
    host.join()
    assert isinstance(host.error, ProtocolViolation) and "32 bytes" in str(host.error)


# ------------------------------------------------------------------ padding the digest list
HOST_IDS = UNIVERSE[:300]
PROBES = UNIVERSE[300:]          # ids the host does not hold, padded into its list


def padding_host(h: Channel, pad: list[str]) -> list[str] | None:
    """A host with a real key and HOST_IDS that adds the digests of ``pad`` to its list; returns
    the ids the guest reports back, or None when the guest reports nothing."""
    pk, sk = rsa.keygen(BITS)
    h.send("guest", "psi/pk", pk)
    psi.prove_key(h, sk, BE)
    limbs = -(-pk.n.bit_length() // 64)
    arr = h.recv("guest", "psi/blinded")
    blinded = [int.from_bytes(np.asarray(r, "<u8").tobytes(), "little")
               for r in np.asarray(arr).reshape(-1, limbs)]
    h.send("guest", "psi/signed", psi._ints_to_u64(sk.raw_decrypt(blinded, BE), pk.n))
    entered = HOST_IDS + pad
    digests = psi._h2(sk.raw_decrypt(full_domain_hash(entered, pk.n), BE), pk.n)
    h.send("guest", "psi/host_digests", b"".join(sorted(digests)))
    try:
        reported = h.recv("guest", "psi/result", timeout=2.0)
    except TransportError:
        return None
    by_digest = dict(zip(digests, entered))
    return [by_digest[reported[i:i + 32]] for i in range(0, len(reported), 32)]


def psi_job(max_ids=None) -> dict:
    params = {} if max_ids is None else {"max_ids": max_ids}
    return validate_job({"algorithm": "psi", "dataset": "breast", "key_bits": BITS,
                         "params": params})


def test_without_declared_counts_padding_probes_the_guest():
    """The control (no ``max_ids``, as before): the host learns which probed ids the guest has."""
    g, h = pair()
    guest = Party(lambda: psi.intersect("guest", psi_job(), g, BE, GUEST_IDS, Timings()), g)
    reported = padding_host(h, PROBES)
    guest.join()
    assert reported is not None
    learned = set(reported) & set(PROBES)
    assert learned == set(PROBES) & set(GUEST_IDS) and learned


def test_declared_counts_refuse_a_padded_digest_list():
    g, h = pair()
    job = psi_job({"guest": len(UNIVERSE), "host": len(HOST_IDS)})
    guest = Party(lambda: psi.intersect("guest", job, g, BE, GUEST_IDS, Timings()), g)
    reported = padding_host(h, PROBES)
    guest.join()
    assert reported is None
    assert isinstance(guest.error, ProtocolViolation) and f"limit of {len(HOST_IDS)}" in \
        str(guest.error)


def test_declared_counts_leave_the_documented_room():
    """What remains: a host may enter any set of its declared size; declared 10 above its real
    set, it probes 10 ids (inherent in PSI: its input is its choice)."""
    g, h = pair()
    job = psi_job({"guest": len(UNIVERSE), "host": len(HOST_IDS) + 10})
    guest = Party(lambda: psi.intersect("guest", job, g, BE, GUEST_IDS, Timings()), g)
    reported = padding_host(h, PROBES[:10])
    guest.join()
    assert guest.error is None and reported is not None
    assert set(reported) & set(PROBES) == set(PROBES[:10]) & set(GUEST_IDS)


def test_declared_counts_hold_each_party_to_its_own():
    g, _h = pair()
    job = psi_job({"guest": 10, "host": 10})
    with pytest.raises(ConfigError, match="max_ids.guest"):
        psi.intersect("guest", job, g, BE, GUEST_IDS, Timings())
    with pytest.raises(ConfigError, match="max_ids"):
        psi_job({"guest": 0, "host": 3})


def test_declared_counts_bound_the_guests_blinded_values_too():
    """The host refuses more blinded values than the guest's declared count, before signing."""
    g, h = pair()
    job = psi_job({"guest": 3, "host": len(HOST_IDS)})
    host = Party(lambda: psi.intersect("host", job, h, BE, HOST_IDS, Timings()), h)
    pk = g.recv("host", "psi/pk")
    psi.verify_host_key(g, pk, BE)
    blinded, _ = pk.blind(full_domain_hash(["1", "2", "3", "4"], pk.n), BE)
    g.send("host", "psi/blinded", psi._ints_to_u64(blinded, pk.n))
    host.join()
    assert isinstance(host.error, ProtocolViolation) and "limit of 3" in str(host.error)
    with pytest.raises(TransportError):
        g.recv("host", "psi/signed", timeout=0.3)


def test_a_guest_may_report_less_than_it_found():
    """What remains with a malicious guest: it may report any subset of the ids it signed that
    the host holds (here none), and the host takes it; it cannot add an id (tests in
    tests/attacks/test_psi_sb.py)."""
    g, h = pair()
    host = Party(lambda: psi.psi_host(h, HOST_IDS, BE, key_bits=BITS), h)
    pk = g.recv("host", "psi/pk")
    psi.verify_host_key(g, pk, BE)
    blinded, _ = pk.blind(full_domain_hash(HOST_IDS[:5], pk.n), BE)
    g.send("host", "psi/blinded", psi._ints_to_u64(blinded, pk.n))
    g.recv("host", "psi/signed")
    g.recv("host", "psi/host_digests")
    g.send("host", "psi/result", b"")
    host.join()
    assert host.error is None and host.result == []
