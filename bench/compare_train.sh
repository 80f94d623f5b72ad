#!/usr/bin/env bash
# Side-by-side CPU training throughput, robust to a noisy machine: runs the
# PyTorch and ll benchmarks alternately N times (same model, same batch, 2
# threads, fp32) and reports each run, the medians and the ratio of medians.
#
#   bench/compare_train.sh [--repeats N] [--steps S]
#
# Environment as bench/run_train_bench.sh (OPENBLAS_CORETYPE, OMP_WAIT_POLICY).
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=3
STEPS=6
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) REPEATS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    *) echo "compare_train.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -q avx512_bf16 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Cooperlake; fi
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "needs Debian python3-torch (apt-get install python3-torch)" >&2; exit 1; }
[ -x build/ll_train_bench ] || { echo "build/ll_train_bench is missing: build first" >&2; exit 1; }
ll=() torch=()
for i in $(seq "$REPEATS"); do
  t=$(/usr/bin/python3 bench/torch_train_bench.py --steps "$STEPS" --threads 2 2>/dev/null | sed -n 's/^RESULT torch tokens_per_s=\([0-9.]*\).*/\1/p')
  l=$(build/ll_train_bench --steps "$STEPS" --threads 2 2>/dev/null | sed -n 's/^RESULT ll tokens_per_s=\([0-9.]*\).*/\1/p')
  echo "run $i: torch $t tokens/s, ll $l tokens/s (load $(cut -d' ' -f1 /proc/loadavg))"
  torch+=("$t"); ll+=("$l")
done
python3 - "${torch[*]}" "${ll[*]}" <<'PY'
import statistics, sys
t = [float(x) for x in sys.argv[1].split()]
l = [float(x) for x in sys.argv[2].split()]
mt, ml = statistics.median(t), statistics.median(l)
print(f"median torch {mt:.1f} tokens/s, median ll {ml:.1f} tokens/s, ratio of medians {ml/mt:.2f}x "
      f"(per-run ratios: {', '.join(f'{b/a:.2f}' for a, b in zip(t, l))})")
print(f"RESULT compare_train torch={mt:.1f} ll={ml:.1f} ratio={ml/mt:.2f}")
PY
