#!/usr/bin/env bash
# The optional CGBN variant's build check (docs/backends/gpu.md, "Optional CGBN variant"): compiles
# the gpu library (unifl/backends/gpu/src/*.cu; CGBN goes into kernels.cu) with -DUNIFL_WITH_CGBN=1 against a CGBN checkout with the
# exact flags of unifl/backends/gpu/build.py (sm_80 + sm_90 SASS, compute_90 PTX, every warning an
# error) into a temporary folder, then prints
#   * the ptxas figures (registers, stack frame, spills) of the CGBN ModExp kernels per arch,
#   * the CGBN kernels found in the library's device code (cuobjdump) and the exported C entry
#     point (nm -D),
# and then, where GMP (gmp.h, libgmp) is found, runs the host check: gpu_cgbn.cuh's per-instance
# algorithm (unifl_cgbn::powm_fixed4) on CGBN's GMP model of the same API (cgbn_mpz.h), compared
# with mpz_powm on edge and random cases of the three size classes.  That checks our use of the API
# (windows, digits, zero exponent, unreduced bases), not CGBN's device code.
# Needs no GPU and no network, and runs nothing on a GPU; nothing in the source tree is written
# (the sources are copied to the temporary folder first).
# Exit status non-zero when the checkout is missing, the compile fails or warns, a kernel or the entry
# point is absent, or the host check fails.
#
#   bash bench/cgbn_build.sh <CGBN checkout or its include/ folder>
#   NVCC=/path/to/nvcc ...   (else as build.py: $CUDA_HOME/bin/nvcc, the pip package
#                             nvidia-cuda-nvcc of this Python, PATH)
#   HOST_CHECK=0 ...         skips the host check; HOST_CHECK=1 makes a missing GMP an error
#   KEEP=1 ...               keeps the temporary folder (the library and the full nvcc log)
set -euo pipefail

die() { echo "cgbn_build.sh: ERROR: $*" >&2; exit 2; }

[ $# -eq 1 ] || die "usage: bash bench/cgbn_build.sh <CGBN checkout or its include/ folder>"
arg=$1
[ -n "$arg" ] && [ -e "$arg" ] || die "CGBN path '$arg' does not exist"
if [ -f "$arg/include/cgbn/cgbn.h" ]; then
    CGBN_INC=$(cd "$arg/include" && pwd)
elif [ -f "$arg/cgbn/cgbn.h" ]; then
    CGBN_INC=$(cd "$arg" && pwd)
else
    die "no cgbn/cgbn.h under '$arg' or '$arg/include': not a CGBN checkout"
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/unifl/backends/gpu/src
[ -f "$SRC/kernels.cu" ] && [ -f "$SRC/gpu_cgbn.cuh" ] || die "kernel sources not found under $SRC"

PY=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; fi

# nvcc as build.py finds it: NVCC, $CUDA_HOME/bin/nvcc, the pip package's nvidia/cu13/bin/nvcc, PATH
find_nvcc() {
    if [ -n "${NVCC:-}" ]; then echo "$NVCC"; return; fi
    if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then echo "$CUDA_HOME/bin/nvcc"; return; fi
    local pip
    pip=$("$PY" -c '
import os
try:
    import nvidia
    for root in nvidia.__path__:
        cand = os.path.join(root, "cu13", "bin", "nvcc")
        if os.path.exists(cand):
            print(cand)
            break
except ImportError:
    pass
' 2>/dev/null || true)
    if [ -n "$pip" ]; then echo "$pip"; return; fi
    command -v nvcc || true
}
NVCC_BIN=$(find_nvcc)
[ -n "$NVCC_BIN" ] && [ -x "$NVCC_BIN" ] || die "nvcc not found (pip install -r requirements-cuda.txt, or set NVCC / CUDA_HOME)"
TK=$(dirname "$(dirname "$(realpath "$NVCC_BIN")")")
LIBDIRS=()
for d in lib lib64; do if [ -d "$TK/$d" ]; then LIBDIRS+=("-L$TK/$d"); fi; done
CUOBJDUMP=$TK/bin/cuobjdump
[ -x "$CUOBJDUMP" ] || CUOBJDUMP=$(command -v cuobjdump || true)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/unifl-cgbn.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "keeping $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi

CGBN_COMMIT="unknown (not a git checkout)"
if command -v git >/dev/null && git -C "$(dirname "$CGBN_INC")" rev-parse HEAD >/dev/null 2>&1; then
    CGBN_COMMIT=$(git -C "$(dirname "$CGBN_INC")" rev-parse HEAD)
fi
# compile a snapshot: nvcc reads the sources once per pass (host, compute_80, compute_90), so an
# edit in the tree during the minutes of the compile could give the passes different kernels
mkdir "$TMP/src"
cp -p "$SRC"/*.cu "$SRC"/*.cuh "$SRC"/*.h "$TMP/src/"
echo "CGBN:   $CGBN_INC (commit $CGBN_COMMIT)"
echo "nvcc:   $NVCC_BIN ($("$NVCC_BIN" --version | tail -n 1))"
echo "source: $SRC (copied to $TMP/src)"
SRC=$TMP/src

# build.py's command with CGBN_INCLUDE_DIR set, plus -Xptxas -v for the figures
CMD=("$NVCC_BIN" "-I$CGBN_INC" -DUNIFL_WITH_CGBN=1 -std=c++17 -O3 -shared -Xcompiler -fPIC
     -Xcompiler -Wall,-Werror -Werror all-warnings
     -gencode arch=compute_80,code=sm_80 -gencode "arch=compute_90,code=[sm_90,compute_90]"
     "-I$SRC" "${LIBDIRS[@]}" -Xptxas -v "$SRC/kernels.cu" "$SRC/device_runtime.cu" "$SRC/c_api.cu"
     -o "$TMP/libunifl_gpu.so")
echo "compiling (minutes: the whole CUDA library, 3 passes): ${CMD[*]}"
t0=$SECONDS
if ! "${CMD[@]}" >"$TMP/nvcc.log" 2>&1; then
    grep -v -e '^ptxas info' -e 'bytes stack frame' "$TMP/nvcc.log" | tail -n 60 >&2
    die "nvcc failed; full log: $TMP/nvcc.log (KEEP=1 keeps it)"
fi
echo "compiled in $((SECONDS - t0)) s"

# anything but ptxas' own -v lines is a diagnostic (with -Werror it would have failed already)
if grep -v -e '^ptxas info' -e '^ *[0-9]* bytes stack frame' "$TMP/nvcc.log" | grep -q .; then
    grep -v -e '^ptxas info' -e '^ *[0-9]* bytes stack frame' "$TMP/nvcc.log" >&2
    die "the compile printed diagnostics"
fi

echo
echo "ptxas -v, CGBN ModExp kernels (unifl_cgbn::k_powm<Params<TPI, BITS>>):"
awk '
    /Compiling entry function .*unifl_cgbn6k_powm/ {
        match($0, /ParamsILj[0-9]+ELj[0-9]+E/); p = substr($0, RSTART + 9, RLENGTH - 10); sub(/ELj/, ", ", p)
        match($0, /for .sm_[0-9]+./); arch = substr($0, RSTART + 5, RLENGTH - 6)
        cur = sprintf("  %-6s TPI, BITS = %-9s", arch, p); next
    }
    cur != "" && /bytes stack frame/ { gsub(/^ +/, ""); frame = $0; next }
    cur != "" && /Used [0-9]+ registers/ { sub(/.*Used/, "Used"); print cur " " $0 "; " frame; cur = ""; n++ }
    END { if (n == 0) exit 1 }
' "$TMP/nvcc.log" || die "no CGBN kernel in the ptxas output"

echo
fail=0
if [ -n "$CUOBJDUMP" ]; then
    echo "device code (cuobjdump -symbols; one entry per class in each of the sm_80 and sm_90 cubins):"
    "$CUOBJDUMP" -symbols "$TMP/libunifl_gpu.so" | grep 'STO_ENTRY.*unifl_cgbn6k_powm' | awk '{print "  " $NF}' | sort | uniq -c
    n_sass=$("$CUOBJDUMP" -symbols "$TMP/libunifl_gpu.so" | grep -c 'STO_ENTRY.*unifl_cgbn6k_powm' || true)
    n_ptx=$("$CUOBJDUMP" -ptx "$TMP/libunifl_gpu.so" | grep -c '\.entry _ZN10unifl_cgbn6k_powm' || true)
    echo "  compute_90 PTX entries: $n_ptx"
    if [ "$n_sass" -ne 6 ] || [ "$n_ptx" -ne 3 ]; then
        echo "  expected 6 SASS entries (3 classes x 2 archs) and 3 PTX entries" >&2
        fail=1
    fi
else
    echo "cuobjdump not found: device symbols not listed"
fi
echo "exported C entry point (nm -D):"
if ! nm -D --defined-only "$TMP/libunifl_gpu.so" | grep -w unifl_gpu_cgbn_mod_exp | sed 's/^/  /'; then
    echo "  unifl_gpu_cgbn_mod_exp missing" >&2
    fail=1
fi
[ $fail -eq 0 ] || die "the library lacks a CGBN kernel or the entry point"

echo
host_checked=no
if [ "${HOST_CHECK:-auto}" = 0 ]; then
    echo "host check skipped (HOST_CHECK=0)"
elif ! printf '#include <gmp.h>\nint main() { mpz_t z; mpz_init(z); mpz_clear(z); return 0; }\n' \
        | "${CXX:-c++}" -x c++ - -o "$TMP/gmp_probe" -lgmp >/dev/null 2>&1; then
    [ "${HOST_CHECK:-auto}" = 1 ] && die "HOST_CHECK=1 but GMP (gmp.h, libgmp) was not found (e.g. apt-get install libgmp-dev)"
    echo "host check skipped: GMP (gmp.h, libgmp) not found (e.g. apt-get install libgmp-dev)"
else
    cat >"$TMP/host_check.cu" <<'CPP'
// unifl_cgbn::powm_fixed4 (gpu_cgbn.cuh) on CGBN's GMP model (cgbn_mpz.h) against mpz_powm.
#include <gmp.h>
#include <cstdint>
#include <cstdio>
#define UNIFL_CGBN_HOST_CHECK 1
#include "gpu_cgbn.cuh"

#if !defined(__CUDA_ARCH__)  // host code only (nvcc also runs a device pass over this file)
static gmp_randstate_t rs;
static long g_cases = 0, g_bad = 0;

template <uint32_t TPI, uint32_t BITS>
void check(const mpz_t m, const mpz_t x, const mpz_t e) {
    typedef cgbn_context_t<TPI> context_t;
    typedef cgbn_env_t<context_t, BITS> env_t;
    cgbn_error_report_t report = {};
    report._error = cgbn_no_error;
    context_t ctx(cgbn_report_monitor, &report);  // flags contract breaks (even m, x >= m in bn2mont)
    env_t env(ctx);
    typename env_t::cgbn_t bx, be, bm, br;
    mpz_set(bx._z, x);
    mpz_set(be._z, e);
    mpz_set(bm._z, m);
    unifl_cgbn::powm_fixed4(env, br, bx, be, bm);
    mpz_t want;
    mpz_init(want);
    mpz_powm(want, x, e, m);
    ++g_cases;
    if (report._error != cgbn_no_error || mpz_cmp(want, br._z) != 0) {
        if (++g_bad <= 5)
            gmp_printf("MISMATCH TPI=%u BITS=%u err=%d\n m=%Zx\n x=%Zx\n e=%Zx\n got=%Zx\n want=%Zx\n", TPI, BITS,
                       (int)report._error, m, x, e, br._z, want);
    }
    mpz_clear(want);
}

// odd moduli of 2, 3, 64, 65, BITS/2+1, BITS-63, BITS-1 and BITS bits; bases 0, 1, m-1, m and random
// below 2^(64·L) (unreduced); exponents 0, 1, 2, 15, 16, random short, random of the class width,
// 2^BITS - 1
template <uint32_t TPI, uint32_t BITS>
void run_class(int reps) {
    mpz_t m, x, e;
    mpz_inits(m, x, e, NULL);
    const int mbits[] = {2, 3, 64, 65, (int)BITS / 2 + 1, (int)BITS - 63, (int)BITS - 1, (int)BITS};
    const unsigned long small[] = {0, 1, 2, 15, 16};
    for (int mb : mbits)
        for (int rep = 0; rep < reps; ++rep) {
            mpz_urandomb(m, rs, mb - 1);
            mpz_setbit(m, mb - 1);
            mpz_setbit(m, 0);
            const int lbits = 64 * ((mb + 63) / 64);
            for (int k = 0; k < 5; ++k) {
                if (k == 0) mpz_urandomb(x, rs, lbits);
                else if (k == 1) mpz_set_ui(x, 0);
                else if (k == 2) mpz_set_ui(x, 1);
                else if (k == 3) mpz_sub_ui(x, m, 1);
                else mpz_set(x, m);
                for (int j = 0; j < 8; ++j) {
                    if (j < 5) {
                        mpz_set_ui(e, small[j]);
                    } else if (j == 5) {
                        mpz_urandomb(e, rs, 1 + rep % 70);
                    } else if (j == 6) {
                        mpz_urandomb(e, rs, BITS);
                    } else {
                        mpz_set_ui(e, 0);
                        mpz_setbit(e, BITS);
                        mpz_sub_ui(e, e, 1);
                    }
                    check<TPI, BITS>(m, x, e);
                }
            }
        }
    mpz_clears(m, x, e, NULL);
}

int main() {
    gmp_randinit_default(rs);
    gmp_randseed_ui(rs, 20240925);
    run_class<8, 1024>(6);
    run_class<16, 2048>(4);
    run_class<32, 4096>(2);
    printf("  %ld cases, %ld mismatches\n", g_cases, g_bad);
    return g_bad ? 1 : 0;
}
#endif
CPP
    echo "host check (powm_fixed4 on CGBN's GMP model vs mpz_powm):"
    # CGBN's GMP model warns under -Wall (sign-compare): here its headers are system headers
    if ! "$NVCC_BIN" -std=c++17 -O2 -Xcompiler -Wall,-Werror -Werror all-warnings "-I$SRC" -isystem "$CGBN_INC" \
            "${LIBDIRS[@]}" "$TMP/host_check.cu" -o "$TMP/host_check" -lgmp >"$TMP/host_check.log" 2>&1; then
        tail -n 40 "$TMP/host_check.log" >&2
        die "the host check did not compile"
    fi
    "$TMP/host_check" || die "the host check found mismatches"
    host_checked=yes
fi

echo
echo "OK: compiled without warnings for sm_80 and sm_90 (host check: $host_checked);"
echo "    the kernels were NOT run: this check needs no GPU and runs nothing on one."
