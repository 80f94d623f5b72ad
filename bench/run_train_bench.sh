#!/usr/bin/env bash
# CPU training-throughput comparison: ll vs PyTorch, against the OpenBLAS sgemm peak.
#
#   bench/run_train_bench.sh [--steps N] [--warmup N] [--no-sgemm] [--no-torch] [--no-ll]
#
# 1. builds bench/sgemm_peak.c into build/sgemm_peak and measures the sgemm peak;
# 2. runs bench/torch_train_bench.py (PyTorch, same model and batch);
# 3. runs build/ll_train_bench if it exists (ll, same model and batch; it does
#    its own 2 warm-up steps, --warmup applies to PyTorch);
# 4. prints a summary table (tokens/s, ll/torch ratio, fraction of sgemm peak).
#
# Everything runs with 2 threads (OMP_NUM_THREADS=2, OPENBLAS_NUM_THREADS=2) and
# OMP_WAIT_POLICY=passive unless the environment sets another policy.
# OpenBLAS kernels: if OPENBLAS_CORETYPE is unset and OpenBLAS' own detection
# falls back to a generic core (it picks "Prescott", SSE3 only, on VMs that hide
# the CPU model), the script sets OPENBLAS_CORETYPE from /proc/cpuinfo
# (avx512_bf16 -> Cooperlake, avx512f -> SkylakeX, avx2 -> Haswell) for ALL
# three programs.  BENCH_CORETYPE=native keeps OpenBLAS' detection;
# BENCH_CORETYPE=<name> forces a core.  Logs go to build/bench_logs/.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

STEPS=10
WARMUP=2
DO_SGEMM=1
DO_TORCH=1
DO_LL=1
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) STEPS=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --no-sgemm) DO_SGEMM=0; shift ;;
        --no-torch) DO_TORCH=0; shift ;;
        --no-ll) DO_LL=0; shift ;;
        -h|--help) sed -n "2,/^set -euo/p" "$0" | sed "/^set -euo/d; s/^# \{0,1\}//"; exit 0 ;;
        *) echo "run_train_bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

export OMP_NUM_THREADS=2
export OPENBLAS_NUM_THREADS=2
# Spinning OpenMP barriers are ruinous on a 2-core machine with anything else
# running (a step can take 2-7x longer); passive waiting costs little when idle.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

BUILD=${BUILD_DIR:-$ROOT/build}
LOGS=$BUILD/bench_logs
mkdir -p "$BUILD" "$LOGS"
LL_BIN=${LL_TRAIN_BENCH:-$BUILD/ll_train_bench}

# ---- sgemm_peak build (also used to ask OpenBLAS which core it detected) ----
SGEMM=$BUILD/sgemm_peak
echo "== building $SGEMM"
# shellcheck disable=SC2046
gcc -O3 -march=native -std=c11 bench/sgemm_peak.c $(pkg-config --cflags --libs openblas) -o "$SGEMM"

# ---- OpenBLAS core type ----
BENCH_CORETYPE=${BENCH_CORETYPE:-auto}
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    echo "== OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (from the environment)"
elif [ "$BENCH_CORETYPE" = native ]; then
    echo "== OpenBLAS core: $("$SGEMM" --core) (OpenBLAS' own detection, BENCH_CORETYPE=native)"
elif [ "$BENCH_CORETYPE" != auto ]; then
    export OPENBLAS_CORETYPE=$BENCH_CORETYPE
    echo "== OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (BENCH_CORETYPE)"
else
    detected=$("$SGEMM" --core)
    flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    want=""
    case " $flags " in
        *" avx512_bf16 "*) want=Cooperlake ;;
        *" avx512f "*) want=SkylakeX ;;
        *" avx2 "*) want=Haswell ;;
    esac
    case "$detected" in
        Prescott|Katmai|Coppermine|Northwood|Core2|Penryn|Dunnington|Nehalem|Barcelona|Opteron*|Athlon|Banias)
            if [ -n "$want" ]; then
                export OPENBLAS_CORETYPE=$want
                echo "== OpenBLAS detected '$detected' (generic; the VM hides the CPU model), CPU flags allow $want:"
                echo "   exporting OPENBLAS_CORETYPE=$want for sgemm_peak, PyTorch and ll alike"
            else
                echo "== OpenBLAS core: $detected"
            fi ;;
        *) echo "== OpenBLAS core: $detected (OpenBLAS' own detection)" ;;
    esac
fi

echo "== $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== OMP_NUM_THREADS=$OMP_NUM_THREADS OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"

result_field() { # result_field FILE TAG KEY  -> value of KEY= on the "RESULT TAG" line
    { grep "^RESULT $2 " "$1" 2>/dev/null || true; } | tail -1 | tr ' ' '\n' | sed -n "s/^$3=//p"
}

# ---- 1. sgemm peak ----
PEAK=""
if [ "$DO_SGEMM" = 1 ]; then
    echo
    echo "== 1/3 OpenBLAS sgemm peak (2 threads); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$SGEMM" --threads 2 | tee "$LOGS/sgemm_peak.log" || echo "NOTE: sgemm_peak failed or its check failed"
    PEAK=$(result_field "$LOGS/sgemm_peak.log" sgemm peak_gflops)
fi

# ---- 2. PyTorch ----
TORCH_LOG=$LOGS/torch_train.log
rm -f "$TORCH_LOG"
if [ "$DO_TORCH" = 1 ]; then
    echo
    echo "== 2/3 PyTorch training bench ($WARMUP warm-up + $STEPS timed steps); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    PY=""
    for cand in "${PYTHON:-}" /usr/bin/python3 python3; do
        [ -n "$cand" ] || continue
        if "$cand" -c 'import torch' >/dev/null 2>&1; then PY=$cand; break; fi
    done
    if [ -z "$PY" ]; then
        echo "NOTE: no python3 with torch found (apt-get install python3-torch); skipping PyTorch" | tee "$TORCH_LOG"
    else
        peak_arg=()
        [ -n "$PEAK" ] && peak_arg=(--peak-gflops "$PEAK")
        "$PY" bench/torch_train_bench.py --steps "$STEPS" --warmup "$WARMUP" --threads 2 "${peak_arg[@]}" \
            2>&1 | tee "$TORCH_LOG" || echo "NOTE: the PyTorch bench failed (see $TORCH_LOG)"
    fi
fi

# ---- 3. ll ----
LL_LOG=$LOGS/ll_train.log
rm -f "$LL_LOG"
if [ "$DO_LL" = 1 ]; then
    echo
    echo "== 3/3 ll training bench; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    if [ -x "$LL_BIN" ]; then
        "$LL_BIN" --steps "$STEPS" 2>&1 | tee "$LL_LOG" || echo "NOTE: $LL_BIN failed (see $LL_LOG)"
    else
        echo "NOTE: $LL_BIN does not exist yet (build it with cmake --build build --target ll_train_bench);"
        echo "      the summary shows PyTorch only."
    fi
fi

# ---- summary ----
T_TOK=$(result_field "$TORCH_LOG" torch tokens_per_s)
T_STEP=$(result_field "$TORCH_LOG" torch step_s)
T_GF=$(result_field "$TORCH_LOG" torch gflops)
L_TOK=$(result_field "$LL_LOG" ll tokens_per_s)
L_STEP=$(result_field "$LL_LOG" ll step_s)
L_GF=$(result_field "$LL_LOG" ll gflops)

echo
echo "== summary: CPU training throughput, 128 x 32/32 tokens per step, fp32, 2 threads" \
     "(OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-native})"
awk -v peak="$PEAK" -v ttok="$T_TOK" -v tstep="$T_STEP" -v tgf="$T_GF" \
    -v ltok="$L_TOK" -v lstep="$L_STEP" -v lgf="$L_GF" 'BEGIN {
    printf "%-8s %14s %10s %10s %14s\n", "", "tokens/s", "s/step", "GFLOP/s", "% sgemm peak"
    row("ll", ltok, lstep, lgf)
    row("torch", ttok, tstep, tgf)
    if (ltok != "" && ttok != "" && ttok + 0 > 0)
        printf "ratio ll/torch (tokens/s): %.2fx\n", ltok / ttok
    else
        printf "ratio ll/torch: n/a (%s missing)\n", (ltok == "" ? "ll" : "torch")
    if (peak != "") printf "sgemm peak: %s GFLOP/s\n", peak
}
function row(name, tok, step, gf) {
    if (tok == "") { printf "%-8s %14s\n", name, "(not run)"; return }
    frac = (peak != "" && peak + 0 > 0) ? sprintf("%.1f%%", 100 * gf / peak) : "n/a"
    printf "%-8s %14.1f %10.3f %10.1f %14s\n", name, tok, step, gf, frac
}' | tee "$LOGS/summary.txt"
echo "(logs in $LOGS)"
