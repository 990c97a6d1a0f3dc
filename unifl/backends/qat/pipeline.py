"""The QAT two-stage pipeline (UniFL §V-B, Fig. 6; Algorithms 6 and 7).

QAT offers ModExp only and has no SIMD-style batch op, so a batch is split into independent tasks
(Alg. 6: Paillier encryption; Alg. 7: ciphertext × plaintext matmul, :func:`mont_multi_exp`):

* stage 1, the QAT queue: every ModExp ``base_i^e_i mod m`` is submitted asynchronously to the
  device through our driver (``unifl.backends.qat``), at most ``max_in_flight`` outstanding;
* stage 2, the CPU queue: as soon as a task's completion flag is set (its ModExp landed), the CPU
  runs its follow-up work -- for Paillier encryption (Alg. 6) the ModMult ``(1 + m·n)·r^n mod n²``
  -- on the ``native`` backend, in small groups of landed tasks (1/32 of the batch, at most 64).

While the CPU works on landed tasks, the device computes the next ones, so the CPU stage hides
behind the device stage.  IPCL-style ``cpu_share`` hands the last ``round(cpu_share·N)`` ModExps to
the CPU (native, on a thread of its own) at the same time.  A task the device could not do (failed
request, operand over 8192 bits, a size class the library refused, session closed under it) is
recomputed on the CPU: every task lands exactly once, whichever way it went.  A session closed before the batch could be submitted (a
concurrent ``close()``) is reopened once, as ``close()`` promises the next use; when the driver
refuses the submission itself, :class:`~unifl.backends.qat.runtime.QatError` (a
:class:`~unifl.core.errors.DeviceError`) is raised and the scheduler's fallback chain takes the batch.

Everything here is stated in limbs (``unifl.core.limbs`` layout); results are bit-identical to
the ``cpu`` backend.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from ...core.contract import OpContract
from ...core.exponents import exp_limbs
from ...core.keys import PaillierPublicMaterial
from ...core.limbs import from_limbs, to_limbs
from ...core.montgomery import MontContext
from ...core.state import DeviceState
from .runtime import FAILED, QatSessionClosed, Session

if TYPE_CHECKING:       # the driver's job type (the pipeline runs only where the driver is built)
    from . import _qat

__all__ = ["PipelineStats", "QatSide", "run_modexp_pipeline", "hybrid_mod_exp", "paillier_encrypt",
           "paillier_encrypt_sequential", "mont_multi_exp"]

#: stage-2 work: finish(indices, modexp_results_of_those_indices) -> None
Finish = Callable[[np.ndarray, np.ndarray], None]


class QatSide(Protocol):
    """What the pipeline uses of a ``QatBackend`` (or of the view of one whose CPU side runs secret
    exponents in constant time): its driver session and settings, its CPU side (the ``native``
    backend) and its per-modulus state."""

    @property
    def cpu(self) -> OpContract: ...
    @property
    def cpu_share(self) -> float: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def instances(self) -> int: ...
    @property
    def state(self) -> DeviceState: ...
    def session(self) -> Session: ...


@dataclass
class PipelineStats:
    """What one pipeline run did.  ``utilisation`` = share of the wall time during which the ModExp
    engine had at least one request outstanding (the host's view of device busy time)."""

    tasks: int = 0
    on_qat: int = 0
    on_cpu_share: int = 0
    recomputed_on_cpu: int = 0
    chunks: int = 0
    wall_seconds: float = 0.0
    device_busy_seconds: float = 0.0
    cpu_stage_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def utilisation(self) -> float:
        return self.device_busy_seconds / self.wall_seconds if self.wall_seconds else 0.0


def _rows(exps: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return exps if exps.shape[0] == 1 else exps[idx]


def run_modexp_pipeline(qat: QatSide, ctx: MontContext, base: np.ndarray, exps: np.ndarray,
                        finish: Finish, cpu_share: float | None = None,
                        stats: PipelineStats | None = None) -> PipelineStats:
    """Run base^e mod m for every row, calling ``finish`` on the CPU for each chunk of landed rows.

    ``qat`` is a ``QatBackend``; its ``cpu`` attribute (the native backend) serves the CPU side.
    """
    st = stats or PipelineStats()
    n = base.shape[0]
    st.tasks += n
    if n == 0:
        return st
    share = qat.cpu_share if cpu_share is None else float(cpu_share)
    n_cpu = min(n, int(round(share * n)))
    n_dev = n - n_cpu
    cpu = qat.cpu
    t0 = time.perf_counter()
    sess = qat.session()
    busy0 = sess.stats()["busy_seconds"]

    # --- stage 1: the QAT queue (submitted first: a refused submission leaves no CPU work behind)
    job: _qat.Job | None = None
    if n_dev:
        dev_exps = exps if exps.shape[0] == 1 else exps[:n_dev]
        try:
            job = sess.start(base[:n_dev], dev_exps, ctx.m_limbs, qat.max_in_flight, qat.instances)
        except QatSessionClosed:
            # closed between taking the session and submitting (a concurrent close()): close()
            # promises the next use a fresh session; a second refusal is raised as a device fault
            sess = qat.session()
            busy0 = sess.stats()["busy_seconds"]
            job = sess.start(base[:n_dev], dev_exps, ctx.m_limbs, qat.max_in_flight, qat.instances)
    st.on_qat += n_dev
    st.on_cpu_share += n_cpu

    # --- the IPCL-style CPU share: its own thread, chunked so stage 2 can take its results early
    cpu_ready: list[tuple[np.ndarray, np.ndarray]] = []
    cpu_cv = threading.Condition()
    cpu_error: list[BaseException] = []

    def cpu_worker() -> None:
        try:
            chunk = max(8, n_cpu // 8)
            for lo in range(n_dev, n, chunk):
                idx = np.arange(lo, min(n, lo + chunk))
                # the GIL is released inside the native op
                res = np.asarray(cpu.op_mod_exp(ctx, base[idx], _rows(exps, idx)))
                with cpu_cv:
                    cpu_ready.append((idx, res))
                    cpu_cv.notify()
        except BaseException as exc:  # surfaced in the caller
            with cpu_cv:
                cpu_error.append(exc)
                cpu_cv.notify()

    worker = None
    if n_cpu:
        worker = threading.Thread(target=cpu_worker, name="unifl-qat-cpu-share", daemon=True)
        worker.start()

    # --- stage 2: the CPU queue, fed by completion flags
    # The CPU takes landed tasks in small groups rather than one by one: each wake-up costs CPU
    # time that a device sharing the host (the simulator) would otherwise use; the group is small
    # enough (1/32 of the batch, at most 64) that the unhidden tail stays a few ModMults.
    min_batch = max(1, min(64, n_dev // 32))
    dev_done = job is None
    cpu_done = 0
    while not dev_done or cpu_done < n_cpu:
        if not dev_done:
            assert job is not None          # dev_done starts True exactly when nothing was submitted
            idx, dev_done = job.wait_landed(0.002 if n_cpu else -1.0, min_batch)
            if idx.size:
                _finish_device_chunk(qat, ctx, base, exps, job, idx, finish, st)
        if n_cpu:
            with cpu_cv:
                if not cpu_ready and not cpu_error and dev_done:
                    cpu_cv.wait(0.05)
                ready, cpu_ready[:] = list(cpu_ready), []
                if cpu_error:
                    raise cpu_error[0]
            for idx, res in ready:
                t = time.perf_counter()
                finish(idx, res)
                st.cpu_stage_seconds += time.perf_counter() - t
                st.chunks += 1
                cpu_done += idx.size
    if worker is not None:
        worker.join()
    st.wall_seconds += time.perf_counter() - t0
    if not sess.closed:
        st.device_busy_seconds += sess.stats()["busy_seconds"] - busy0
    if job is not None:
        sess.cpu_size_classes()        # warns once about a size class the library refused
    return st


def _finish_device_chunk(qat: QatSide, ctx: MontContext, base: np.ndarray, exps: np.ndarray,
                         job: _qat.Job, idx: np.ndarray, finish: Finish, st: PipelineStats
                         ) -> None:
    """Stage 2 for rows that landed from the device: take their ModExp results (recomputing on the
    CPU the ones flagged FAILED), then run ``finish`` on them."""
    t = time.perf_counter()
    res, flags = job.rows(idx)
    bad = np.flatnonzero(flags == FAILED)
    if bad.size:
        rows = idx[bad]
        res[bad] = qat.cpu.op_mod_exp(ctx, base[rows], _rows(exps, rows))
        st.recomputed_on_cpu += bad.size
    finish(idx, res)
    st.cpu_stage_seconds += time.perf_counter() - t
    st.chunks += 1


# ------------------------------------------------------------------ ModExp with the CPU share
def hybrid_mod_exp(qat: QatSide, ctx: MontContext, base: np.ndarray, exps: np.ndarray,
                   stats: PipelineStats | None = None) -> np.ndarray:
    """base^e mod m, the device and (``cpu_share``) the CPU together; stage 2 only collects."""
    out = np.empty((base.shape[0], ctx.num_limbs), np.uint64)

    def collect(idx: np.ndarray, res: np.ndarray) -> None:
        out[idx] = res

    run_modexp_pipeline(qat, ctx, base, exps, collect, stats=stats)
    return out


# ------------------------------------------------------------------ Paillier encryption (Alg. 6)
def _mm(cpu: OpContract, ctx: MontContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MontMult on the CPU side; a one-row ``b`` applies to every row of ``a``."""
    a = np.ascontiguousarray(a, dtype=np.uint64)
    if b.shape[0] == 1 and a.shape[0] != 1:
        b = np.broadcast_to(b, a.shape)
    if a.shape[0] == 0:
        return np.empty(a.shape, np.uint64)
    return np.asarray(cpu.op_mont_mul(ctx, a, np.ascontiguousarray(b, dtype=np.uint64)))


def _row(ctx: MontContext, value: int) -> np.ndarray:
    return to_limbs([value % ctx.m], ctx.num_limbs)


def _r3(qat: QatSide, ctx: MontContext) -> np.ndarray:
    """R³ mod m as one limb row (MontMult(x, R³) = x·R²), once per modulus."""
    return qat.state.get(ctx, "r3", lambda: _row(ctx, pow(ctx.R, 3, ctx.m)))


def _gm(pk: PaillierPublicMaterial, m_rows: np.ndarray) -> np.ndarray:
    """g^m = 1 + m·n (no reduction needed: m < n so 1 + m·n < n²), Alg. 6 line 6."""
    n = pk.n
    return to_limbs([1 + x * n for x in from_limbs(m_rows)], pk.nsquare_ctx.num_limbs)


def _modmult_into(qat: QatSide, pk: PaillierPublicMaterial, out: np.ndarray, m: np.ndarray,
                  idx: np.ndarray, rn: np.ndarray) -> None:
    """Alg. 6 line 7 in Montgomery form: out[idx] = (1 + m·n)·r^n·R mod n², as
    MontMult(MontMult(g^m, R³), r^n) = g^m·R²·r^n·R^-1, on the CPU (native)."""
    ctx = pk.nsquare_ctx
    gm_r2 = _mm(qat.cpu, ctx, _gm(pk, m[idx]), _r3(qat, ctx))
    out[idx] = _mm(qat.cpu, ctx, gm_r2, rn)


def _paillier_operands(pk: PaillierPublicMaterial, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    padded = np.zeros((r.shape[0], pk.nsquare_ctx.num_limbs), np.uint64)
    padded[:, :r.shape[1]] = r
    return padded, exp_limbs(pk.n)


def paillier_encrypt(qat: QatSide, pk: PaillierPublicMaterial, m: np.ndarray, r: np.ndarray,
                     stats: PipelineStats | None = None) -> np.ndarray:
    """Alg. 6, pipelined: r_i^n mod n² on QAT, (1 + m_i·n)·r_i^n mod n² on the CPU as each lands.
    Returns Montgomery-form ciphertexts mod n² (the SDK's layout)."""
    ctx = pk.nsquare_ctx
    base, e = _paillier_operands(pk, r)
    out = np.empty((m.shape[0], ctx.num_limbs), np.uint64)
    run_modexp_pipeline(qat, ctx, base, e, lambda idx, rn: _modmult_into(qat, pk, out, m, idx, rn),
                        stats=stats)
    return out


def paillier_encrypt_sequential(qat: QatSide, pk: PaillierPublicMaterial, m: np.ndarray,
                                r: np.ndarray, stats: PipelineStats | None = None) -> np.ndarray:
    """The unpipelined baseline: every ModExp on QAT first, then every ModMult on the CPU."""
    ctx = pk.nsquare_ctx
    base, e = _paillier_operands(pk, r)
    st = stats or PipelineStats()
    t0 = time.perf_counter()
    rn = hybrid_mod_exp(qat, ctx, base, e, stats=PipelineStats())
    t1 = time.perf_counter()
    out = np.empty((m.shape[0], ctx.num_limbs), np.uint64)
    _modmult_into(qat, pk, out, m, np.arange(m.shape[0]), rn)
    st.tasks += m.shape[0]
    st.cpu_stage_seconds += time.perf_counter() - t1
    st.wall_seconds += time.perf_counter() - t0
    return out


# ------------------------------------------------------------------ ciphertext matmul (Alg. 7)
def mont_multi_exp(qat: QatSide, ctx: MontContext, bases_mont: np.ndarray, exps: np.ndarray,
                   stats: PipelineStats | None = None) -> np.ndarray:
    """Alg. 7, pipelined: out[k] = prod_j y_j^(x_kj) mod m (Montgomery form in and out).

    Stage 1 submits the K·N ModExps y_j^(x_kj) to QAT (zero exponents never leave the host);
    stage 2 folds each landed group into its row's accumulator on the CPU: the group's results
    enter the Montgomery domain, are multiplied per row (one grouped product) and into acc[k].
    """
    k, n, le = exps.shape
    cpu = qat.cpu
    acc = np.repeat(_row(ctx, ctx.r_mod), k, axis=0)
    if k == 0 or n == 0:
        return acc
    base = _mm(cpu, ctx, np.ascontiguousarray(bases_mont), _row(ctx, 1))   # out of the domain
    tasks_base = np.ascontiguousarray(np.tile(base, (k, 1)))            # task t = row·N + j
    tasks_exp = np.ascontiguousarray(exps.reshape(k * n, le))

    def fold(idx: np.ndarray, res: np.ndarray) -> None:
        rows = idx // n
        present, group = np.unique(rows, return_inverse=True)
        res_mont = _mm(cpu, ctx, res, _row(ctx, ctx.r2))
        prods = cpu.op_mont_prod_groups(ctx, res_mont, group.astype(np.int64), present.size)
        acc[present] = _mm(cpu, ctx, acc[present], np.asarray(prods))

    run_modexp_pipeline(qat, ctx, tasks_base, tasks_exp, fold, stats=stats)
    return acc
