"""A hostile peer against PSI and SecureBoost: each test plays the deviating party over the real
wire (Channel over LocalTransport, the codec's messages) against the real code of the other
party, and asserts the attempt is refused with a typed error, before the work it asks for."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

import unifl
from unifl import mod_op
from unifl.app import codec, psi
from unifl.app.params import BoostParams
from unifl.app.secureboost import protocol as sbt_protocol
from unifl.app.channel import Channel, local_transports
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import validate_job
from unifl.app.timing import Timings
from unifl.core.errors import (ProtocolViolation, SignatureError, TransportError,
                          WeakKeyError)
from unifl.phe_sdk import EncryptedArray, paillier, rsa, rsa_proof
from unifl.phe_sdk.rsa import full_domain_hash

from tests.helpers.party import Party

BE = unifl.backend("native")
BITS = 1024
WAIT = 3.0          # seconds a party waits for a message that a refused peer never sends


@pytest.fixture(scope="module")
def rsa_key():
    return rsa.keygen(BITS)


@pytest.fixture(scope="module")
def pai_key():
    return paillier.keygen(BITS)


def pair(wait: float = WAIT):
    t = local_transports()
    return Channel(t["guest"], wait, BE), Channel(t["host"], wait, BE), t


# ================================================================== PSI: a hostile host
GUEST_IDS = [str(i) for i in range(0, 24, 2)] + ["x"]
HOST_IDS = [str(i) for i in range(0, 24, 3)] + ["x", "z"]


def _raw_rsa_key_message(n: int, e: int) -> bytes:
    """The codec's message for an RSA public key, written by hand: the object could not even be
    built with e != 65537, a hostile host writes the bytes."""
    from unifl.phe_sdk import serialize
    text = json.dumps({"unifl": serialize.FORMAT_VERSION, "kind": "rsa.public",
                       "n": format(n, "x"), "e": format(e, "x")}).encode()
    return codec.MAGIC + bytes([codec.VERSION]) + b"R" + struct.pack("<I", len(text)) + text


def _u64(values, n):
    return psi._ints_to_u64(values, n)


def _ints(arr, n):
    limbs = -(-n.bit_length() // 64)
    return [int.from_bytes(np.asarray(r, "<u8").tobytes(), "little") for r in arr.reshape(-1, limbs)]


def test_guest_refuses_host_key_with_small_e(rsa_key):
    pk, _ = rsa_key
    g, h, t = pair()
    guest = Party(lambda: psi.psi_guest(g, GUEST_IDS, BE), g)
    t["host"].send("guest", "psi/pk", _raw_rsa_key_message(pk.n, 3))
    guest.join()
    assert isinstance(guest.error, WeakKeyError) and "65537" in str(guest.error)
    with pytest.raises(TransportError):     # it blinded nothing, sent nothing
        h.recv("guest", "psi/blinded", timeout=0.3)


def test_guest_refuses_host_key_below_its_own_floor(rsa_key):
    """The guest's job asks for 2048-bit RSA: a 1024-bit key from the host is refused before
    any exponentiation, whatever the host claims."""
    pk, _ = rsa_key
    g, h, _t = pair()
    job = validate_job({"algorithm": "psi", "key_bits": 2048, "params": {}})
    guest = Party(lambda: psi.intersect("guest", job, g, BE, GUEST_IDS, Timings()), g)
    h.send("guest", "psi/pk", pk)
    guest.join()
    assert isinstance(guest.error, WeakKeyError) and "2048" in str(guest.error)
    with pytest.raises(TransportError):
        h.recv("guest", "psi/blinded", timeout=0.3)


def _hostile_host(rsa_key, tamper_signed=None, digests=None, guest_kwargs=None):
    """A host that signs with its real key, then tampers with what it returns."""
    pk, sk = rsa_key
    g, h, _t = pair()
    guest = Party(lambda: psi.psi_guest(g, GUEST_IDS, BE, **(guest_kwargs or {})), g)
    h.send("guest", "psi/pk", pk)
    psi.prove_key(h, sk, BE)                 # an honest key: its proof passes
    blinded = _ints(h.recv("guest", "psi/blinded"), pk.n)
    signed = sk.raw_decrypt(blinded, BE)
    own = psi._h2(sk.raw_decrypt(full_domain_hash(HOST_IDS, pk.n), BE), pk.n)
    arr = _u64(signed, pk.n)
    if tamper_signed is not None:
        arr = tamper_signed(signed, arr)
    h.send("guest", "psi/signed", arr)
    h.send("guest", "psi/host_digests", b"".join(sorted(own)) if digests is None else digests)
    return guest.join(), h


def test_guest_refuses_a_forged_signature(rsa_key):
    """One wrong 'signature' (here s·2): unverified, it silently drops that id from the
    intersection (or, chosen well, makes the guest match what the host wants)."""
    pk, _ = rsa_key

    def forge(signed, arr):
        signed = list(signed)
        signed[0] = signed[0] * 2 % pk.n      # GUEST_IDS[0] = "0" is in the intersection
        return _u64(signed, pk.n)
    guest, h = _hostile_host(rsa_key, forge)
    assert isinstance(guest.error, SignatureError)
    assert f"1 of {len(GUEST_IDS)}" in str(guest.error)
    with pytest.raises(TransportError):     # no intersection was reported
        h.recv("guest", "psi/result", timeout=0.3)


def test_guest_refuses_signatures_that_are_not_a_function_of_its_ids(rsa_key):
    """The host returns the blinded values themselves: every one fails."""
    pk, _ = rsa_key
    guest, _h = _hostile_host(rsa_key, lambda signed, arr: _u64(
        [pow(s, rsa.E, pk.n) for s in signed], pk.n))
    assert isinstance(guest.error, SignatureError)
    assert f"{len(GUEST_IDS)} of {len(GUEST_IDS)}" in str(guest.error)


@pytest.mark.parametrize("tamper,what", [
    (lambda s, a: a[:-1], "count"),                                  # one signature short
    (lambda s, a: np.concatenate([a, a[:1]]), "count"),              # one extra
    (lambda s, a: a.astype(np.int64), "dtype"),
    (lambda s, a: a[:, :-1].copy(), "limbs"),
])
def test_guest_checks_the_shape_of_the_signatures(rsa_key, tamper, what):
    guest, _ = _hostile_host(rsa_key, tamper)
    assert isinstance(guest.error, ProtocolViolation), what


def test_guest_refuses_a_signature_outside_the_group(rsa_key):
    pk, _ = rsa_key
    guest, _ = _hostile_host(rsa_key, lambda s, a: _u64([pk.n] + list(s[1:]), pk.n))
    assert isinstance(guest.error, ProtocolViolation) and "[1, n)" in str(guest.error)


def test_guest_refuses_malformed_or_oversize_host_digests(rsa_key):
    guest, _ = _hostile_host(rsa_key, digests=b"\x00" * 33)
    assert isinstance(guest.error, ProtocolViolation) and "multiple" in str(guest.error)
    guest, _ = _hostile_host(rsa_key, digests=b"\x00" * 32 * 9, guest_kwargs={"max_peer_ids": 8})
    assert isinstance(guest.error, ProtocolViolation) and "limit of 8" in str(guest.error)


# ================================================================== PSI: a hostile guest
def _host_party(ids=HOST_IDS, **kw):
    g, h, _t = pair()
    host = Party(lambda: psi.psi_host(h, ids, BE, key_bits=BITS, **kw), h)
    pk = g.recv("host", "psi/pk")
    psi.verify_host_key(g, pk, BE)           # the key challenge, as the real guest runs it
    return host, g, pk


@pytest.mark.parametrize("bad", ["zero", "n", "above n"])
def test_host_refuses_blinded_values_outside_the_group(bad):
    host, g, pk = _host_party()
    v = {"zero": 0, "n": pk.n, "above n": pk.n + 1}[bad]
    g.send("host", "psi/blinded", _u64([5, v], pk.n))
    host.join()
    assert isinstance(host.error, ProtocolViolation) and "(0, n)" in str(host.error)
    with pytest.raises(TransportError):      # signed nothing
        g.recv("host", "psi/signed", timeout=0.3)


def test_host_refuses_too_many_blinded_values_before_signing(monkeypatch):
    calls = []
    real = rsa.PrivateKey.raw_decrypt
    monkeypatch.setattr(rsa.PrivateKey, "raw_decrypt",
                        lambda self, v, be=None: calls.append(len(v)) or real(self, v, be))
    host, g, pk = _host_party(max_peer_ids=4)
    g.send("host", "psi/blinded", _u64([2, 3, 4, 5, 6], pk.n))
    host.join()
    assert isinstance(host.error, ProtocolViolation) and "limit of 4" in str(host.error)
    # only the key proof's challenges and its own ids were ever signed
    assert calls == [rsa_proof.CHALLENGES, len(HOST_IDS)]


def _guest_reports(report):
    """An honest-looking guest (one id) that then reports ``report(host_digests)``."""
    host, g, pk = _host_party()
    x = full_domain_hash(["3"], pk.n)
    blinded, rs = pk.blind(x, BE)
    g.send("host", "psi/blinded", _u64(blinded, pk.n))
    signed = _ints(g.recv("host", "psi/signed"), pk.n)
    theirs = g.recv("host", "psi/host_digests")
    mine = psi._h2(pk.unblind(signed, rs, BE), pk.n)
    g.send("host", "psi/result", report(mine, [theirs[i:i + 32] for i in range(0, len(theirs), 32)]))
    return host.join()


def test_host_accepts_an_honest_single_id_report():
    host = _guest_reports(lambda mine, theirs: mine[0])
    assert host.error is None and host.result == ["3"]


@pytest.mark.parametrize("report,why", [
    # the guest holds one id but claims the host's whole set (it saw every host digest)
    (lambda mine, theirs: b"".join(theirs), "limit of 1"),
    (lambda mine, theirs: mine[0] + mine[0], "limit of 1"),
    (lambda mine, theirs: bytes(32), "does not have"),
    (lambda mine, theirs: mine[0] + b"\x01", "multiple"),
])
def test_host_refuses_a_forged_intersection(report, why):
    host = _guest_reports(report)
    assert isinstance(host.error, ProtocolViolation) and why in str(host.error)


def test_host_refuses_duplicate_intersection_digests():
    """Two blinded ids, the same (real) intersection digest twice."""
    host, g, pk = _host_party()
    blinded, rs = pk.blind(full_domain_hash(["3", "6"], pk.n), BE)
    g.send("host", "psi/blinded", _u64(blinded, pk.n))
    signed = _ints(g.recv("host", "psi/signed"), pk.n)
    g.recv("host", "psi/host_digests")
    d = psi._h2(pk.unblind(signed, rs, BE), pk.n)[0]
    g.send("host", "psi/result", d + d)
    host.join()
    assert isinstance(host.error, ProtocolViolation) and "twice" in str(host.error)


def test_host_refuses_to_send_a_faulty_crt_signature(monkeypatch):
    """A fault in the p half of the CRT (injected into that half's ModExp) while the host signs the
    guest's blinded values: the host must not send the result, because the faulty signature s
    factors n: gcd(s^e − x, n) is q."""
    keys, faults = {}, []
    real_keygen = rsa.keygen
    guest_ids = ["1", "2", "3"]                 # 3 values: HOST_IDS has another count

    def keygen(bits, *a):
        keys["pk"], keys["sk"] = real_keygen(bits, *a)
        return keys["pk"], keys["sk"]

    def faulty(real):
        def exp(be, ctx, base, *rest, **kw):
            out = real(be, ctx, base, *rest, **kw)
            sk = keys.get("sk")
            if sk is not None and ctx is sk.p_ctx and len(base) == len(guest_ids):
                out = np.array(out, copy=True)
                out[0, 0] ^= np.uint64(1)       # one flipped bit in one half
                faults.append(1)
            return out
        return exp

    monkeypatch.setattr(rsa, "keygen", keygen)
    # whichever modular exponentiation the CRT halves run on
    for name in ("mod_exp", "mod_exp_secret"):
        if hasattr(mod_op, name):
            monkeypatch.setattr(mod_op, name, faulty(getattr(mod_op, name)))
    host, g, pk = _host_party()
    blinded, _ = pk.blind(full_domain_hash(guest_ids, pk.n), BE)
    g.send("host", "psi/blinded", _u64(blinded, pk.n))
    host.join()
    assert faults, "the fault was not injected"
    assert isinstance(host.error, SignatureError)
    with pytest.raises(TransportError):
        g.recv("host", "psi/signed", timeout=0.3)

    # why: the same faulty halves, combined by the CRT, hand out a factor of n
    sk = keys["sk"]
    x = blinded[0]
    sp = pow(x % sk.p, sk.dp, sk.p) ^ 1
    sq = pow(x % sk.q, sk.dq, sk.q)
    s = sq + sk.q * ((sp - sq) * sk.q_inverse % sk.p)
    assert pow(s, rsa.E, pk.n) != x
    assert math.gcd(pow(s, rsa.E, pk.n) - x, pk.n) == sk.q


# ================================================================== SecureBoost: a hostile guest
SB_PARAMS = {"n_trees": 2, "max_depth": 2, "max_rows": 40, "num_bins": 8}


@pytest.fixture(scope="module")
def sb_setup():
    job = validate_job({"algorithm": "secureboost", "dataset": "breast", "seed": 5,
                        "key_bits": BITS, "params": dict(SB_PARAMS)})
    p = BoostParams.from_job(job["params"])
    ids = sorted_ids(load_party("breast", "host").ids)
    bins_tr = sbt_protocol._prepare("host", job, p, ids, None)[0]
    return job, p, ids, bins_tr


class HostileGuest:
    """Speaks the SecureBoost wire protocol to the real ``_host`` and deviates where told."""

    def __init__(self, sb_setup, pai_key, wait: float = WAIT) -> None:
        job, self.p, ids, self.bins = sb_setup
        self.pk, _ = pai_key
        self.g, h, _t = pair(wait)
        self.host = Party(lambda: sbt_protocol._host(job, self.p, h, BE, Timings(), ids, None), h)
        self.g.send("host", "sbt/pk", self.pk)
        info = self.g.recv("host", "sbt/info")
        self.n, self.fh = int(info["rows"]), int(info["features"])
        assert (self.n, self.fh) == self.bins.shape

    def gh(self, count=None):
        """The [[g, h]] stream of the last level request: one chunk holding the wanted nodes'
        rows (``count`` ciphertexts in their place, if given), then the end marker."""
        if not self.host.thread.is_alive():      # refused already: nothing to encrypt for
            raise TransportError("the host has stopped")
        tree, depth, nodes, active, want = self.last
        m = len(sbt_protocol.wanted_rows(nodes.astype(np.int64), active, want))
        enc = EncryptedArray.encrypt(self.pk, np.ones(m if count is None else count, np.int64),
                                     backend=BE)
        tag = f"sbt/t{tree}/d{depth}/gh"
        self.g.send("host", tag, {"chunk": 0, "rows": [0, m], "data": enc})
        try:
            self.g.send("host", tag, {"end": 1})
        except TransportError:   # the host refused the chunk and stopped: the test reads why
            pass

    def level(self, depth, nodes, want, active=None, tree=0):
        nodes = np.asarray(nodes, np.int32)
        active = int(nodes.max()) + 1 if active is None else active
        self.g.send("host", f"sbt/t{tree}/level", {
            "tree": tree, "depth": depth, "active": active,
            "nodes": nodes, "want": np.asarray(want, np.int32)})
        self.last = (tree, depth, nodes, active, want)

    def hist(self, depth, tree=0):
        """The level's [[g, h]] stream, then the host's histograms."""
        self.gh()
        return self.g.recv("host", f"sbt/t{tree}/d{depth}/hist")

    def splits(self, depth, splits, tree=0):
        self.g.send("host", f"sbt/t{tree}/d{depth}/splits", [list(map(int, s)) for s in splits])
        return self.g.recv("host", f"sbt/t{tree}/d{depth}/left")

    def root(self):
        """Tree 0, depth 0, as the protocol has it."""
        self.level(0, np.zeros(self.n), [0])
        return self.hist(0)

    def refused(self, *fragments) -> ProtocolViolation:
        self.host.join()
        err = self.host.error
        assert isinstance(err, ProtocolViolation), repr(err)
        for f in fragments:
            assert f in str(err), (f, str(err))
        return err


def reconstruct_binned_matrix(guest: HostileGuest) -> np.ndarray | None:
    """The attack: at the root, ask the host to split on every (feature, bin) and read the host's
    binned matrix off the answers (bin of row r, feature f = the first b with r going left).
    Returns the matrix if the host answered, None if it refused."""
    guest.root()
    nb = guest.p.num_bins
    queries = [(0, f, b) for f in range(guest.fh) for b in range(nb - 1)]
    try:
        reply = guest.splits(0, queries)
    except TransportError:
        return None
    left = np.array(reply["left"]).reshape(guest.fh, nb - 1, guest.n)
    # bin = number of thresholds b the row is above
    return (~left).sum(axis=1).T.astype(np.int32)


def test_guest_cannot_pull_the_host_binned_matrix_by_split_queries(sb_setup, pai_key):
    guest = HostileGuest(sb_setup, pai_key)
    stolen = reconstruct_binned_matrix(guest)
    guest.refused("split queries", "at most one per active node (1)")
    assert stolen is None


def test_guest_cannot_put_every_row_in_a_node_of_its_own(sb_setup, pai_key):
    """One node per row at the root: the histograms would be the host's binned matrix."""
    guest = HostileGuest(sb_setup, pai_key)
    guest.level(0, np.arange(guest.n), np.arange(guest.n))
    guest.refused("'active'", "[1, 1]")
    with pytest.raises(TransportError):
        guest.hist(0)


def _to_depth_1(guest: HostileGuest, host_split=None):
    """Root, then a split (the guest's own: first half / second half, or the host's), then the
    depth-1 pair; returns the depth-1 node assignment."""
    guest.root()
    reply = guest.splits(0, [host_split] if host_split else [])
    if host_split:
        go_left = np.asarray(reply["left"][0])
    else:
        go_left = np.arange(guest.n) < guest.n // 2
    nodes = np.where(go_left, 0, 1)
    return nodes


def test_honest_path_to_depth_1_is_answered(sb_setup, pai_key):
    guest = HostileGuest(sb_setup, pai_key)
    nodes = _to_depth_1(guest, (0, 1, 3))
    want = [0] if (nodes == 0).sum() <= (nodes == 1).sum() else [1]
    guest.level(1, nodes, want)
    guest.hist(1)
    reply = guest.splits(1, [(0, 0, 2), (1, 2, 5)])
    assert len(reply["left"]) == 2
    guest.g.send("host", "sbt/t0/level", None)


@pytest.mark.parametrize("attack,fragments,wait", [
    # the same node twice
    (lambda g, nodes: g.splits(1, [(0, 0, 2), (0, 1, 2)]), ["node 0 asked twice"], WAIT),
    # a node that is not active
    (lambda g, nodes: g.splits(1, [(2, 0, 2)]), ["not an active node", "< 2"], WAIT),
    # a feature beyond the host's
    (lambda g, nodes: g.splits(1, [(0, g.fh, 2)]), ["split feature", "outside [0, "], WAIT),
    # a bin beyond num_bins
    (lambda g, nodes: g.splits(1, [(0, 0, g.p.num_bins)]), ["bin", "num_bins = 8"], WAIT),
    # more split queries than active nodes
    (lambda g, nodes: g.splits(1, [(0, 0, 1), (1, 0, 1), (0, 1, 1)]), ["at most one per active"],
     WAIT),
    # a huge list: the attacker's own encoding of it (our codec, 400,000 values) takes about a
    # second on a quiet machine and more under a loaded test run, all while the host waits; the
    # host must still be waiting when it arrives, so that the refusal is what the test reads
    (lambda g, nodes: g.splits(1, [(0, 0, 1)] * 100_000), ["100000 split queries"], 60.0),
])
def test_host_refuses_out_of_protocol_split_queries(sb_setup, pai_key, attack, fragments, wait):
    guest = HostileGuest(sb_setup, pai_key, wait)
    nodes = _to_depth_1(guest)
    guest.level(1, nodes, [0])
    guest.hist(1)
    with pytest.raises(TransportError):
        attack(guest, nodes)
    guest.refused(*fragments)


@pytest.mark.parametrize("attack,fragments", [
    # a histogram of a node that is not active / not the smaller child / twice
    (lambda g, nodes: g.level(1, nodes, [2], active=2), ["'want'"]),
    (lambda g, nodes: g.level(1, nodes, [1]), ["'want'"]),
    (lambda g, nodes: g.level(1, nodes, [0, 0]), ["'want'"]),
    # children that are not all the rows of their parent (one row dropped from the tree)
    (lambda g, nodes: g.level(1, np.where(np.arange(g.n) == 0, -1, nodes), [0], active=2),
     ["not all the rows of one node"]),
    # a level beyond max_depth (2): the guest skips to depth 2
    (lambda g, nodes: g.level(2, nodes, [0]), ["depth 2", "next level of tree 0 is depth 1"]),
    # a tree beyond n_trees
    (lambda g, nodes: g.g.send("host", "sbt/t0/level", {
        "tree": 2, "depth": 1, "active": 2, "nodes": nodes.astype(np.int32),
        "want": np.zeros(1, np.int32)}), ["tree 2", "n_trees = 2"]),
    # a huge node list
    (lambda g, nodes: g.level(1, np.zeros(1_000_000), [0]), ["shape (1000000,)"]),
    # an odd number of active nodes (a child without its sibling)
    (lambda g, nodes: g.level(1, np.zeros(g.n), [0], active=1), ["in pairs"]),
    # more active nodes than the last level's nodes can have children
    (lambda g, nodes: g.level(1, nodes, [0], active=3), ["'active' = 3", "[1, 2]"]),
])
def test_host_refuses_out_of_protocol_level_requests(sb_setup, pai_key, attack, fragments):
    guest = HostileGuest(sb_setup, pai_key)
    nodes = _to_depth_1(guest)
    attack(guest, nodes)
    guest.refused(*fragments)
    with pytest.raises(TransportError):
        guest.hist(1)


def test_host_refuses_children_unlike_its_own_split(sb_setup, pai_key):
    """After the host split the root, the guest claims other children (to get histograms of row
    sets of its choosing)."""
    guest = HostileGuest(sb_setup, pai_key)
    nodes = _to_depth_1(guest, (0, 1, 3))
    forged = nodes.copy()
    forged[0] ^= 1                      # one row moved to the other child
    guest.level(1, forged, [0] if (forged == 0).sum() <= (forged == 1).sum() else [1])
    guest.refused("split by the host", "not the host's partition")


def test_host_refuses_depth_at_max_depth(sb_setup, pai_key):
    """Depth 0 and 1 honestly; a level at depth 2 = max_depth is refused."""
    guest = HostileGuest(sb_setup, pai_key)
    nodes = _to_depth_1(guest)
    guest.level(1, nodes, [0])
    guest.hist(1)
    guest.splits(1, [])
    deeper = np.where(np.arange(guest.n) % 2 == 0, 2 * nodes, 2 * nodes + 1)
    counts = np.bincount(deeper, minlength=4)
    want = [0 if counts[0] <= counts[1] else 1, 2 if counts[2] <= counts[3] else 3]
    guest.level(2, deeper, want)
    guest.refused("depth 2", "max_depth = 2")


@pytest.mark.parametrize("rows", [-1, +1])
def test_host_refuses_gh_of_the_wrong_size(sb_setup, pai_key, rows):
    guest = HostileGuest(sb_setup, pai_key)
    guest.level(0, np.zeros(guest.n), [0])
    guest.gh(count=guest.n + rows)
    guest.refused("[[g, h]]", f"{guest.n} ciphertexts")


def test_host_refuses_a_guest_key_below_its_key_bits(sb_setup, pai_key):
    job, p, ids, _ = sb_setup
    strict = dict(job, key_bits=2048)
    g, h, _t = pair()
    host = Party(lambda: sbt_protocol._host(strict, p, h, BE, Timings(), ids, None), h)
    g.send("host", "sbt/pk", pai_key[0])
    host.join()
    assert isinstance(host.error, WeakKeyError) and "2048" in str(host.error)


# ================================================================== SecureBoost: a hostile host
def test_guest_refuses_a_host_feature_count_that_would_exhaust_its_memory(sb_setup):
    job, p, ids, bins = sb_setup
    g, h, _t = pair()
    guest = Party(lambda: sbt_protocol._guest(job, p, g, BE, Timings(), ids, None, False), g)
    h.recv("guest", "sbt/pk")
    h.send("guest", "sbt/info", {"rows": int(bins.shape[0]), "features": 10 ** 9})
    guest.join()
    assert isinstance(guest.error, ProtocolViolation) and "1000000000" in str(guest.error)


@pytest.mark.parametrize("reply,why", [
    ({"records": [0], "left": [np.ones(3, bool)]}, "wrong size"),
    ({"records": [0, 1], "left": [np.ones(5, bool)] * 2}, "different number"),
    ({"records": [0], "left": [np.ones(5, np.int64)]}, "wrong size or type"),
    ({"records": [-1], "left": [np.ones(5, bool)]}, "record ids"),
])
def test_guest_checks_the_host_split_answer(pai_key, reply, why):
    pk, sk = pai_key
    g, h, _t = pair()
    p = BoostParams(num_bins=8)
    remote = sbt_protocol._RemoteHost(g, sk, Timings(), p, 4, 10)
    h.send("guest", "sbt/t0/d0/left", reply)
    with pytest.raises(ProtocolViolation, match=why):
        remote.split(0, 0, np.array([0] * 5 + [-1] * 5), [(0, 1, 2)])
