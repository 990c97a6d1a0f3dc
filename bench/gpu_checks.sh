#!/usr/bin/env bash
# The checks that need a real CUDA GPU, in one go (what a session with a GPU runs; CI has none):
#   1. build the extensions in place (nvcc from NVCC / PATH; a CUDA library already built by CI's
#      nvcc 13.0 is kept when it is newer than its sources),
#   2. the gpu-marked tests, the kernel tests on the device, the cross-backend equivalence harness
#      for `gpu`, and the two-party vertical LR with the guest on `gpu`,
#   3. the benches, both kernel families side by side in one process each (thread: one thread per
#      instance; group: the cooperative kernels): the wave-size bench per UNIFL_GPU_WAVE value,
#      bench/bench_gpu.py (per op the batch-size sweep 1k..131k, plateaus, the batch reaching 90 %,
#      the targets beside them, kernels=auto's calibration), bench/bench_owner_encrypt.py, and
#      `unifl bench` (table2 + ops) on gpu / native / cpu.
# One log ($OUT/checks.log) and the benches' JSON/PNG go to $OUT (default bench/results/gpu-run).  Steps are independent: a failing
# one is reported and the next one still runs; the exit status is that of the first failure.
#
#   bash bench/gpu_checks.sh [quick|full]     (full: also `unifl bench`)
set -u
OUT=${OUT:-bench/results/gpu-run}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
QUICK=${1:-}
PY=${PYTHON:-python3}
status=0
step() {   # step NAME TIMEOUT_S CMD... : run, append to $OUT/checks.log, remember the first failure
    local name=$1 limit=$2; shift 2
    echo "=== $name: $*"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/step.log" 2>&1
    local rc=$?
    { echo "=== $name: $*"; cat "$OUT/step.log"; echo "=== $name: rc=$rc"; } >>"$OUT/checks.log"
    echo "=== $name: rc=$rc in $((SECONDS - t0)) s"
    tail -n 25 "$OUT/step.log"
    rm -f "$OUT/step.log"
    [ $rc -ne 0 ] && [ $status -eq 0 ] && status=$rc
    return 0
}

step env 60 bash -c "nvidia-smi; nvcc --version; $PY --version; $PY -c 'import numpy, gmpy2, pydantic; print(numpy.__version__, gmpy2.version(), pydantic.VERSION)'"
if [ -f unifl/backends/gpu/libunifl_gpu.so ]; then touch unifl/backends/gpu/libunifl_gpu.so; fi
step build 400 env NVCC="${NVCC:-$(command -v nvcc)}" "$PY" setup.py -q build_ext --inplace
step devices 60 "$PY" -m unifl devices
step test_gpu 450 "$PY" -m pytest -q -rs -p no:cacheprovider -m gpu tests/
step test_equivalence_gpu 500 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_equivalence.py \
    tests/test_app_vertical.py -k "gpu and not gpu_host"
if [ "$QUICK" = quick ]; then
    step bench_gpu 400 "$PY" bench/bench_gpu.py --quick --kernels thread,group --json "$OUT/bench_gpu.json"
else
    # 16384 is the built-in default of both families (no separate "unset" run: it would repeat it)
    for w in 0 8192 16384 32768; do
        step waves 240 env UNIFL_GPU_WAVE=$w "$PY" bench/bench_gpu_waves.py --kernels thread,group
    done
    step bench_gpu 720 "$PY" bench/bench_gpu.py --kernels thread,group --json "$OUT/bench_gpu.json" \
        --plot "$OUT/gpu_sweep.png"
    step owner 300 "$PY" bench/bench_owner_encrypt.py --json "$OUT/owner.json"
fi
if [ "$QUICK" = full ]; then
    step unifl_bench 500 "$PY" -m unifl bench --suite table2 --suite ops \
        --backend gpu --backend native --out "$OUT"
fi
echo "=== gpu_checks: exit $status"
exit $status
