"""Attacks found in review of the hostile-peer hardening: each test plays the deviating party
against the real code of the other and fails on the code before its fix."""

from __future__ import annotations


import numpy as np
import pytest

import unifl
from unifl.app import horizontal
from unifl.app.params import BoostParams
from unifl.app.secureboost import packing, protocol as sbt_protocol
from unifl.app.channel import Channel, local_transports
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import validate_job
from unifl.app.timing import Timings
from unifl.core.errors import ProtocolViolation, WeakKeyError
from unifl.phe_sdk import EncryptedArray, paillier

from tests.helpers.party import Party

BE = unifl.backend("native")
BITS = 1024
WAIT = 15.0        # generous: key generation on a loaded machine comes before some messages


# ================================================================== SecureBoost: a hostile host
SB_PARAMS = {"n_trees": 1, "max_depth": 2, "max_rows": 40, "num_bins": 8}


@pytest.fixture(scope="module")
def sb_job():
    job = validate_job({"algorithm": "secureboost", "dataset": "breast", "seed": 5,
                        "key_bits": BITS, "params": dict(SB_PARAMS)})
    p = BoostParams.from_job(job["params"])
    ids = sorted_ids(load_party("breast", "host").ids)
    bins_tr = sbt_protocol._prepare("host", job, p, ids, None)[0]
    return job, p, ids, bins_tr


def _hostile_host_root(sb_job, forge):
    """The real guest against a host that answers the root's histogram request with
    ``forge(guest's [[ĝ + 2^64 ĥ]], number of ciphertexts an honest answer has)``."""
    job, p, ids, bins = sb_job
    t = local_transports()
    g, h = Channel(t["guest"], WAIT, BE), Channel(t["host"], WAIT, BE)
    guest = Party(lambda: sbt_protocol._guest(job, p, g, BE, Timings(), ids, None, False), g)
    pk = h.recv("guest", "sbt/pk")
    n, fh = bins.shape
    h.send("guest", "sbt/info", {"rows": int(n), "features": int(fh), "scale_bits": p.scale_bits,
                                 "chunk_rows": p.chunk_rows})
    level = h.recv("guest", "sbt/t0/level")
    assert level["depth"] == 0
    enc_gh = h.recv("guest", "sbt/t0/d0/gh")["data"]     # the root: every row, one chunk
    assert enc_gh.shape == (n,) and h.recv("guest", "sbt/t0/d0/gh") == {"end": 1}
    width = packing.cell_bits(n)
    per = packing.cells_per_ciphertext(pk, width)
    count = -(-fh * p.num_bins // per)
    assert count <= n       # the guest's own ciphertexts are enough to fill an answer
    h.send("guest", "sbt/t0/d0/hist", forge(enc_gh, count))
    guest.join(60)
    return guest


def test_guest_refuses_its_own_gradients_returned_as_histograms(sb_job):
    """The host sends back the guest's [[ĝ + 2^64 ĥ]] (re-randomised, so no digest matches) as
    the root histogram: each decrypts to one row's (ĝ, ĥ) in a bin of the host's choosing, and
    the guest's split decisions then depend on single rows' gradients (the labels in tree 0)."""
    guest = _hostile_host_root(sb_job, lambda enc, count: enc[:count].obfuscate())
    assert isinstance(guest.error, ProtocolViolation), repr(guest.error)
    assert "add up" in str(guest.error) or "packed cells" in str(guest.error)


def test_guest_refuses_a_scaled_combination_of_its_gradients(sb_job):
    """One row's [[ĝ + 2^64 ĥ]] raised to 2^w·k lands in the cell the host picks; the rest E(0)."""
    def forge(enc, count):
        width = packing.cell_bits(sb_job[3].shape[0])
        one = enc[:1] * np.array([1 << (3 * width)], dtype=object)
        zeros = enc[1:count] * np.zeros(count - 1, np.int64)
        return EncryptedArray.concatenate([one, zeros]).obfuscate()
    guest = _hostile_host_root(sb_job, forge)
    assert isinstance(guest.error, ProtocolViolation), repr(guest.error)


def test_guest_refuses_histograms_at_a_scale_of_the_hosts_choosing(sb_job):
    def forge(enc, count):
        e = enc[:count].obfuscate()
        return EncryptedArray(e.public_key, e.limbs, e.shape, 24, e.bound, e.backend)
    guest = _hostile_host_root(sb_job, forge)
    assert isinstance(guest.error, ProtocolViolation), repr(guest.error)
    assert "scale" in str(guest.error)


# ================================================================== hlr: a hostile guest
def test_hlr_host_holds_the_shared_key_to_the_jobs_key_bits():
    """The job says 2048 bits; the host's party config (its channel floor) allows 1024.  A guest
    that shares a 1024-bit key pair must be refused by the job's own key size, before the host
    encrypts its model under the weaker key."""
    job = validate_job({"algorithm": "hlr", "dataset": "breast", "seed": 1, "key_bits": 2048,
                        "parties": ["guest", "host", "arbiter"], "params": {"rounds": 1}})
    p = horizontal.HorizontalParams.from_job(job["params"])
    pk, sk = paillier.keygen(BITS)
    t = local_transports(("guest", "host", "arbiter"))
    g = Channel(t["guest"], WAIT, BE)
    h = Channel(t["host"], WAIT, BE, min_key_bits=1024)
    host = Party(lambda: horizontal._client("host", job, p, h, BE, Timings(), None, False), h)
    g.send("host", "hfl/pk", pk)
    g.send_private_key("host", "hfl/sk", sk)
    host.join(60)
    assert isinstance(host.error, WeakKeyError), repr(host.error)
    assert "2048" in str(host.error)


def test_run_local_parties_hold_received_keys_to_the_jobs_key_bits():
    from unifl.app import jobs
    seen = []
    real = jobs.Channel

    def spy(*a, **kw):
        chan = real(*a, **kw)
        seen.append(chan.min_key_bits)
        return chan
    job = {"algorithm": "psi", "dataset": "breast", "key_bits": BITS, "params": {}}
    mp = pytest.MonkeyPatch()
    mp.setattr(jobs, "Channel", spy)
    try:
        jobs.run_local(job, BE)
    finally:
        mp.undo()
    assert seen == [BITS, BITS]
