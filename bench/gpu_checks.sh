#!/usr/bin/env bash
# The GPU checks in one go, old and new kernels side by side (what a session with a GPU runs; CI
# has none), in about five minutes when the libraries come prebuilt:
#   1. the machine (nvidia-smi, nvcc, python);
#   2. the CUDA library of this tree (unifl/backends/gpu/libunifl_gpu.so: kept when present, e.g.
#      built here by CI's nvcc and carried over; else built for this GPU's sm_90 only) and of the
#      baseline tree (BASE, default build/gpu-baseline: the tree at BASE_COMMIT, the cooperative kernels
#      as measured on an H200; `make gpu-baseline` prepares it on any machine with git and nvcc, else it is
#      taken from git here) -- the two builds run at once;
#   3. both kernel families of this tree against cpu on the device, the cooperative ones under every
#      window and shape (the gpu-marked tests of tests/backends/gpu/test_thread_kernels.py: exact results before timing);
#   4. bench/gpu_targets.py for the baseline and for this tree (ModExp-2048; 1024-bit key public,
#      key-owner and decryption; one call of 32 public encryptions with a 2048-bit key; this tree's
#      3/4/5-bit windows and normal/wide shapes), then the compact table of both;
#   5. the job end to end (bench/bench_e2e.py --gpu: default_credit, 1024- and 2048-bit keys, 2
#      epochs, dispatch calibrated, our two-party and arbiter jobs on (native, native), (gpu, gpu),
#      (gpu, native), after a small warm-up job per key size that fills the tuning and dispatch
#      caches; about three minutes on an H200) in whatever is left of DEADLINE_S (default 480: the
#      whole script within 8 minutes); rows that no longer fit are recorded as skipped.  The data:
#      UNIFL_DATA_DIR, or shared/data beside the checkout.
# Everything lands in $OUT (default bench/results/gpu-run): checks.log, baseline.json, new.json,
# table.txt, e2e/bench_e2e.json and .png.  Steps are independent: a failing one is reported and the
# next one still runs; the exit status is that of the first failure.  A PYTHONPATH set by the
# caller (packages installed with pip --target) is kept behind each tree's own.
#
#   bash bench/gpu_checks.sh [quick]     (quick: batches 8x smaller, for a first look)
#   bash bench/gpu_checks.sh prepare     (step 2 only, on any machine with git and nvcc: `make
#                                         gpu-baseline`; then carry build/gpu-baseline and the
#                                         tree's libunifl_gpu.so + _build_info.json to the GPU)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/gpu-run}
BASE=${BASE:-build/gpu-baseline}
BASE_COMMIT=${BASE_COMMIT:-72c8f0e}
PY=${PYTHON:-python3}
QUICK=${1:-}
DEADLINE_S=${DEADLINE_S:-480}
KEEP_PATH=${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
: >"$OUT/checks.log"
export PYTHONUNBUFFERED=1
status=0
step() {   # step NAME TIMEOUT_S CMD... : run, append to $OUT/checks.log, remember the first failure
    local name=$1 limit=$2; shift 2
    echo "=== $name: $*"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/step-$name.log" 2>&1
    local rc=$?
    { echo "=== $name: $*"; cat "$OUT/step-$name.log"; echo "=== $name: rc=$rc"; } >>"$OUT/checks.log"
    echo "=== $name: rc=$rc in $((SECONDS - t0)) s"
    tail -n 25 "$OUT/step-$name.log"
    rm -f "$OUT/step-$name.log"
    [ $rc -ne 0 ] && [ $status -eq 0 ] && status=$rc
    return 0
}
built() {  # built TREE: its CUDA library is there, its build record says built and, where the
           # record has the sources' digest (this tree's build step writes it), it is theirs
    [ -f "$1/unifl/backends/gpu/libunifl_gpu.so" ] &&
        grep -q '"built": true' "$1/unifl/backends/gpu/_build_info.json" 2>/dev/null &&
        (cd "$1" && "$PY" -c '
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("b", "unifl/backends/gpu/build.py")
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
rec = json.load(open("unifl/backends/gpu/_build_info.json"))
have = getattr(b, "sources_digest", None)
sys.exit(0 if have is None or rec.get("sources") == have("unifl/backends/gpu") else 1)')
}
build_lib() {  # build_lib TREE: the CUDA library alone (the tree's own build step; nvcc as it finds it)
    (cd "$1" && env UNIFL_CUDA_BUILD=1 UNIFL_CUDA_ARCHS="${UNIFL_CUDA_ARCHS:-90}" "$PY" -c '
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("b", "unifl/backends/gpu/build.py")
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
here = os.path.abspath("unifl/backends/gpu")
b._build_cuda(here, here)
sys.exit(0 if os.path.exists(os.path.join(here, b.LIBRARY)) else 1)')
}

[ "$QUICK" = prepare ] ||
    step env 60 bash -c "nvidia-smi; nvcc --version; $PY --version; $PY -c 'import numpy, gmpy2; print(numpy.__version__, gmpy2.version())'"

# 2. libraries (the baseline tree from git when it was not carried over)
if [ ! -d "$BASE/unifl" ]; then
    step baseline_tree 60 bash -c "mkdir -p '$BASE' && git archive '$BASE_COMMIT' | tar -x -C '$BASE'"
fi
# (the baseline's own build step compiles sm_80 and sm_90: minutes on a GPU machine's cores, up to
# ten or more on two shared ones -- BUILD_TIMEOUT, seconds)
[ "$QUICK" = prepare ] && : "${BUILD_TIMEOUT:=3600}"
BUILD_TIMEOUT=${BUILD_TIMEOUT:-900}
export PY
export -f build_lib
pids=()
if ! built .; then (step build_new "$BUILD_TIMEOUT" bash -c 'build_lib .') & pids+=($!); fi
if ! built "$BASE"; then (step build_baseline "$BUILD_TIMEOUT" bash -c "build_lib '$BASE'") & pids+=($!); fi
for p in "${pids[@]}"; do wait "$p"; done
built . || { echo "no CUDA library for this tree"; status=1; }
if ! built "$BASE"; then
    echo "no CUDA library for the baseline: its rows will be missing"
    [ "$QUICK" = prepare ] && status=1
fi
if [ "$QUICK" = prepare ]; then echo "=== gpu_checks prepare: exit $status"; exit $status; fi

# 3. exact on the device first
step test_gpu 240 "$PY" -m pytest -q -rs -p no:cacheprovider -n 8 -m gpu tests/backends/gpu/test_thread_kernels.py

# 4. the targets, baseline then new, and the table
Q=(); [ "$QUICK" = quick ] && Q=(--quick)
if built "$BASE"; then
    step targets_baseline 240 env PYTHONPATH="$BASE$KEEP_PATH" "$PY" bench/gpu_targets.py --label baseline "${Q[@]}" \
        --json "$OUT/baseline.json"
fi
step targets_new 300 env PYTHONPATH=".$KEEP_PATH" "$PY" bench/gpu_targets.py --label new "${Q[@]}" --json "$OUT/new.json"
tables=()
for f in "$OUT/baseline.json" "$OUT/new.json"; do [ -f "$f" ] && tables+=("$f"); done
if [ ${#tables[@]} -gt 0 ]; then
    "$PY" bench/gpu_targets.py --table "${tables[@]}" | tee "$OUT/table.txt"
fi

# 5. the job end to end, in what is left of the deadline
left=$((DEADLINE_S - SECONDS - 15))
if [ "$QUICK" != quick ] && [ $left -gt 60 ]; then
    step e2e $((left + 10)) env PYTHONPATH=".$KEEP_PATH" "$PY" bench/bench_e2e.py --gpu --budget-s "$left" --out "$OUT/e2e"
else
    echo "=== e2e: skipped (${left} s left of DEADLINE_S=${DEADLINE_S}${QUICK:+, $QUICK})"
fi
echo "=== gpu_checks: exit $status in $SECONDS s"
exit $status
