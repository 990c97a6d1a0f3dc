"""The pool of Paillier obfuscators computed ahead (``PublicKey.obfuscators``): every factor used
exactly once across threads, forked processes and a resumed run; bounded; refilled while waiting;
counted; configured from the party YAML."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time

import numpy as np
import pytest

import unifl
from unifl.configs import PartyConfig
from unifl.core.errors import KeyMismatchError, OperandError
from unifl.core.state import PoolLimits, RowPool
from unifl.phe_sdk import paillier as P
from unifl.scheduler import backend_from_config

from tests.helpers.keys import paillier_keypair

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")   # fork with threads


def _fresh_key(bits: int = 1024) -> tuple[P.PublicKey, P.PrivateKey]:
    """A key object of its own (pools are per key and backend instance: the tests isolate them by
    fresh backend instances)."""
    _, sk0 = paillier_keypair(bits)
    sk = P.PrivateKey(sk0.p, sk0.q)
    return sk.public_key, sk


def _backend(**limits: float) -> unifl.core.backend.Backend:
    """A fresh native (else cpu) instance with its own state and the given pool limits."""
    name = "native" if "native" in unifl.available_backends() else "cpu"
    be = unifl.backend(name, **({"threads": 2} if name == "native" else {}))
    if limits:
        be.state.pool_limits = PoolLimits(**limits)       # type: ignore[arg-type]
    return be


def _zeros(pk: P.PublicKey, be, count: int) -> list[int]:
    """E(0) of ``count`` zeros through the pool: each is its obfuscation factor r^n itself."""
    return pk.raw_encrypt([0] * count, backend=be)


def test_encryption_through_the_pool_is_one_mont_mul_and_decrypts():
    pk, sk = _fresh_key()
    be = _backend()
    pool = pk.obfuscators(be)
    assert pool.reserve(40) == 40
    x = np.linspace(-3, 3, 30)
    arr = unifl.EncryptedArray.encrypt(pk, x, backend=be)
    assert np.allclose(arr.decrypt(sk), x)
    s = pool.stats()
    assert (s.ready, s.hits, s.misses, s.filled) == (10, 30, 0, 40)
    # a factor per element: 30 distinct ciphertexts even for equal plaintexts
    c = pk.raw_encrypt([5] * 10, backend=be)
    assert len(set(c)) == 10 and sk.raw_decrypt(c) == [5] * 10
    assert pool.ready() == 0


def test_pooled_ciphertexts_equal_the_direct_path_for_the_same_r():
    pk, sk = _fresh_key()
    be = _backend()
    ms = [0, 1, 2, pk.n - 1, pk.max_int]
    rs = [3, 5, 7, pk.n - 2, 1 << 500]
    want = pk.raw_encrypt(ms, backend="cpu", r_values=rs)
    pk.obfuscators(be).fill(r_values=rs)
    assert pk.raw_encrypt(ms, backend=be) == want
    sk.obfuscators(be).fill(r_values=rs)          # filled by the key owner through the CRT
    assert sk.raw_encrypt(ms, backend=be) == want


def test_exhaustion_takes_what_is_there_and_computes_the_rest():
    pk, sk = _fresh_key()
    be = _backend()
    pool = pk.obfuscators(be)
    pool.fill(r_values=[11, 13])
    c = pk.raw_encrypt([1, 2, 3, 4], backend=be)
    assert sk.raw_decrypt(c) == [1, 2, 3, 4]
    assert c[:2] == pk.raw_encrypt([1, 2], backend="cpu", r_values=[11, 13])
    s = pool.stats()
    assert (s.ready, s.hits, s.misses) == (0, 2, 2)
    assert sk.raw_decrypt(pk.raw_encrypt([9], backend=be)) == [9]      # empty pool: fresh
    assert pool.stats().misses == 3


def test_every_factor_is_handed_out_once_across_threads_while_refilling():
    pk, _ = _fresh_key()
    be = _backend(max_bytes=300 * 8 * pk.nsquare_ctx.num_limbs, fill_batch=25)
    pool = pk.obfuscators(be)
    pool.reserve(300)
    taken: list[np.ndarray] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(30):
            rows, k = pool.take(7)
            if k:
                with lock:
                    taken.append(np.asarray(rows))

    stop = threading.Event()

    def refiller() -> None:
        while not stop.is_set():
            pool.fill(25)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    fill = threading.Thread(target=refiller)
    fill.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    fill.join()
    rows = np.concatenate(taken)
    assert len({r.tobytes() for r in rows}) == len(rows)            # no factor twice
    s = pool.stats()
    assert s.hits == len(rows) and s.filled == s.hits + s.ready + s.dropped
    assert s.ready <= s.capacity == 300


def test_memory_is_bounded_and_a_zero_bound_turns_the_pool_off():
    pk, sk = _fresh_key()
    row = 8 * pk.nsquare_ctx.num_limbs
    be = _backend(max_bytes=10 * row + row // 2, fill_batch=4)
    pool = pk.obfuscators(be)
    assert pool.capacity == 10
    assert pool.reserve(1000) == 10 and pool.fill(5) == 0
    with pytest.raises(OperandError, match="room for 0"):
        pool.fill(r_values=[3])
    off = _backend(max_bytes=0)
    assert pk.obfuscators(off).reserve(50) == 0
    assert sk.raw_decrypt(pk.raw_encrypt([4], backend=off)) == [4]


def test_refill_while_waiting_fills_in_the_background_and_stops():
    pk, _ = _fresh_key()
    be = _backend(slice_seconds=0.02, fill_batch=64)
    pool = pk.obfuscators(be)
    got = pool.refill_while(lambda: (time.sleep(0.6), "message")[1])
    assert got == "message"
    time.sleep(0.3)                       # the last slice may still land
    ready = pool.ready()
    assert ready > 0
    time.sleep(0.3)
    assert pool.ready() == ready          # stopped with the wait
    with pytest.raises(RuntimeError, match="peer gone"):
        pool.refill_while(lambda: (_ for _ in ()).throw(RuntimeError("peer gone")))
    # a full pool stops filling by itself
    small = _backend(max_bytes=5 * 8 * pk.nsquare_ctx.num_limbs)
    full = pk.obfuscators(small)
    full.refill_while(lambda: time.sleep(0.5))
    assert full.ready() == 5


def test_a_forked_child_never_hands_out_its_parents_factors():
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    pk, sk = _fresh_key()
    be = _backend()
    pk.obfuscators(be).reserve(6)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()

    def child() -> None:
        pool = pk.obfuscators(be)
        q.put((pool.ready(), pool.stats().dropped, _zeros(pk, be, 3)))

    p = ctx.Process(target=child)
    p.start()
    ready, dropped, child_zeros = q.get(timeout=60)
    p.join(60)
    assert (ready, dropped) == (0, 6)
    parent_zeros = _zeros(pk, be, 3)
    assert pk.pool_size(be) == 3
    assert not set(child_zeros) & set(parent_zeros)   # without the fork guard: the same three


def test_a_fork_the_hook_missed_is_caught_by_the_pid():
    pool = RowPool("test", 2, PoolLimits())
    pool.fill_with(3, lambda k: np.arange(2 * k, dtype=np.uint64).reshape(k, 2) + 1)
    res = pool.claim(2)
    pool._pid = os.getpid() + 1          # as if this process were a child the hook did not see
    assert pool.take(3) == (None, 0)
    assert pool.deposit(res, np.ones((2, 2), np.uint64)) == 0       # computed before: dropped
    assert pool.stats().dropped == 5


def test_a_pool_is_never_pickled_and_a_resumed_run_starts_empty():
    pk, sk = _fresh_key()
    be = _backend()
    rs = [17, 19, 23]
    pk.obfuscators(be).fill(r_values=rs)
    cpu = unifl.backend("cpu")
    factors = np.asarray(unifl.base_op.to_mont(cpu, pk.nsquare_ctx, P.encrypt_limbs(
        cpu, pk, np.zeros((3, pk.n_ctx.num_limbs), np.uint64), r=pk.n_ctx.to_limbs(rs))))
    with pytest.raises(TypeError, match="never leaves its process"):
        pickle.dumps(pk.obfuscators(be))
    blob = pickle.dumps(pk)                  # what a checkpoint of the key would hold
    for row in factors:
        assert row.tobytes() not in blob
    saved = unifl.dumps(pk)
    ctx = multiprocessing.get_context("spawn")   # the resumed run: a new process
    with ctx.Pool(1) as workers:
        ready, c = workers.apply(_resumed_run, (saved,))
    assert ready == 0
    assert not set(c) & set(pk.raw_encrypt([0] * 3, backend="cpu", r_values=rs))
    assert pk.pool_size(be) == 3             # the first run's factors are still its own


def _resumed_run(saved: bytes) -> tuple[int, list[int]]:
    pk = unifl.loads(saved)
    be = unifl.backend()
    pool = pk.obfuscators(be)
    ready = pool.ready()
    pool.reserve(3)
    return ready, pk.raw_encrypt([0] * 3, backend=be)


def test_owner_pool_and_key_checks():
    pk, sk = _fresh_key()
    _, other = _fresh_key(2048)
    with pytest.raises(KeyMismatchError):
        pk.obfuscators("cpu", private_key=other)
    be = _backend()
    pool = sk.obfuscators(be)                 # the owner fills through the CRT
    assert pool is pk.obfuscators(be)
    pool.reserve(20)
    c = pk.raw_encrypt(list(range(20)), backend=be)
    assert sk.raw_decrypt(c) == list(range(20)) and len(set(c)) == 20


def test_party_yaml_bounds_the_pools_and_the_report_counts_them():
    cfg = PartyConfig.model_validate({"party": "guest", "backend": "cpu", "fallback": [],
                                      "obfuscators": {"max_mb": 0.25, "fill_batch": 8,
                                                      "slice_ms": 10}})
    be = backend_from_config(cfg)
    assert be.state.pool_limits == PoolLimits(max_bytes=1 << 18, fill_batch=8,
                                              slice_seconds=0.01)
    pk, sk = _fresh_key()
    pool = pk.obfuscators(be)
    assert pool.capacity == (1 << 18) // (8 * pk.nsquare_ctx.num_limbs)
    pool.reserve(10)
    sk.raw_decrypt(pk.raw_encrypt([1] * 12, backend=be))
    row, = be.pool_report()
    assert (row["backend"], row["filled"], row["fills"], row["hits"], row["misses"]) == \
        ("cpu", 10, 2, 10, 2)
    for bad in ({"max_mb": -1}, {"fill_batch": 0}, {"size": 3}):
        with pytest.raises(Exception, match="obfuscators"):
            PartyConfig.model_validate({"party": "guest", "obfuscators": bad})
