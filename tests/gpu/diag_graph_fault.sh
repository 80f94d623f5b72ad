#!/usr/bin/env bash
# Which part of the CUDA-graph path makes fp32 training fault on a GPU?  (An H100 answered
# "an illegal instruction was encountered" after ~100 updates of gpu_test_decode_parity's fp32
# training with graphs on, twice, 2026-11-27 and -28; without graphs it passes.)  Trains the
# same model in variants, each named with its outcome, the last log line and the graph
# counters; scripts/gpu_check.sh's graphfault step runs it.  A diagnosis, not a test: exit 0.
# LL_GRAPH_FAULT_MEMCHECK=0 leaves compute-sanitizer out.
source "$(dirname "$0")/lib.sh"
gpu_or_skip
bible_or_fail
extra=(${LL_BIBLE_EXTRA:-})
variant() { # NAME TIMEOUT UPDATES PRECISION [env K=V ...] -- [--set ...]
  local name=$1 lim=$2 upd=$3 prec=$4 envs=() t0 rc
  shift 4
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  t0=$(date +%s)
  TRAIN_WRAP=(env ${envs[@]+"${envs[@]}"} timeout "$lim" ${WRAP[@]+"${WRAP[@]}"})
  bible_train "$name" "$GPUDEV" "$prec" "$upd" "${extra[@]}" "$@"
  rc=$?
  TRAIN_WRAP=()
  local u g
  u=$(grep '| update' "$T/$name.log" | tail -1 | sed 's/.*| update \([0-9]*\) .*/\1/')
  g=$(grep 'CUDA graphs: [0-9]* steps' "$T/$name.log" | sed 's/^.*CUDA graphs: //' | cut -c1-160)
  echo "graph-fault: $name (${envs[*]:-} $*): rc $rc in $(($(date +%s) - t0)) s, last update logged ${u:-none}:" \
    "$(tail -1 "$T/$name.log" | cut -c1-200)${g:+ | graphs: $g}"
}
U=${LL_GRAPH_FAULT_UPDATES:-300}
variant repro 60 "$U" fp32
variant noupdate 60 "$U" fp32 LL_CUDA_GRAPH_UPDATE=0
variant notf32 60 "$U" fp32 -- --set train.tf32=false
variant bf16 60 "$U" bf16
variant kept1 60 "$U" fp32 LL_CUDA_GRAPHS_KEPT=1
variant eager_load 60 "$U" fp32 CUDA_MODULE_LOADING=EAGER
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2> /dev/null | head -1)
if [ "${LL_GRAPH_FAULT_MEMCHECK:-1}" != 0 ] && [ -n "$CS" ] && ! "$BIN/lltrain" --devices 2>&1 | grep -q EMULATED; then
  WRAP=("$CS" --tool memcheck --print-limit 5 --log-file "$T/memcheck.cs.log")
  variant memcheck 150 160 fp32
  WRAP=()
  echo "graph-fault: memcheck said: $(grep -E '^=========' "$T/memcheck.cs.log" 2> /dev/null | grep -v COMPUTE-SANITIZER |
    head -12 | paste -sd' ' | cut -c1-1500)"
fi
keep_logs graph_fault "$T"/*.log
exit 0
