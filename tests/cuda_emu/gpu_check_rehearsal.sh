#!/usr/bin/env bash
# scripts/gpu_check.sh rehearsed on the CUDA emulation, so that a mistake in the script (a
# wrong flag, a branch that never ran, a summary line that greps nothing) costs CI a minute, not
# a GPU session its few minutes.  Nothing here is a GPU result: the build is the emulation's
# (-DLL_CUDA_EMU=ON) and compute-sanitizer is a stand-in that only checks its command line
# (tests/cuda_emu/sanitizer_standin.sh).
#
#   tests/cuda_emu/gpu_check_rehearsal.sh BUILD   (an emulated build folder: scripts/cuda_emu_test.sh plain's)
#
# Three runs of gpu_check.sh on tiny sizes:
#   1. tests,long,graphfault,sanitize: every step must pass (nvidia-smi aside: there is none), and
#      the sanitize step must run every selected test under memcheck with ctest's environment
#      (the bf16 variant's LL_PARITY_PRECISION) and racecheck/synccheck on those named;
#   2. tests,long with every matmul failing (LL_CUDA_EMU_LT_REFUSE=fail): the failed tests must be
#      named and run again with the per-op sync check and without programmatic dependent launch,
#      and the failed decode-parity followed by the graphfault variants;
#   3. quickstart,bench (the second call) with GPU_CHECK_TRAIN_MIN=full, tiny models and without
#      PyTorch: every step passes, the summary has BLEU/chrF and the profile, and each A/B of the
#      bench step switches what it names (its RESULT line, or a source that reads its variable).
# Exit status 0 when both went as they should.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:?usage: $0 EMULATED-BUILD-FOLDER}" && pwd)
grep -q '^LL_CUDA_EMU:BOOL=ON' "$B/CMakeCache.txt" || { echo "rehearsal: $B is not an emulated build" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
bad() {
  echo "rehearsal: FAIL: $*" >&2
  fail=1
}
targets="lltrain lldecode llprep lleval ll_gpu_bench ll_decode_bench" # (what the tests and the bench step run)
for f in "$SRC"/tests/gpu/test_*.c; do targets+=" gpu_$(basename "$f" .c)"; done
# the quick tests of the rehearsal: a few fast ones, the bf16 variant among them (its environment
# must reach the sanitizer's run) and two the racecheck list names
QUICK='gpu_test_(gpu_smoke|graph_cond_cuda|layernorm_cuda|decode_cuda|ops_cuda_bf16)$'
export GPU_CHECK_BUILD=$B GPU_CHECK_CMAKE_ARGS=-DLL_CUDA_EMU=ON GPU_CHECK_TARGETS=$targets GPU_CHECK_ENV_SH=none \
  GPU_CHECK_TESTS=$QUICK GPU_CHECK_SANITIZER=$SRC/tests/cuda_emu/sanitizer_standin.sh GPU_CHECK_TAR=0 \
  GPU_CHECK_RACECHECK="layernorm_cuda ops_cuda_bf16" GPU_CHECK_BUDGET=900
# the emulated Bible runs' shrunk sizes (cmake/cuda_emu_tests.cmake) for the graphfault step,
# whose variants train 2 updates of 256 tokens each
export LL_GRAPH_FAULT_UPDATES=2 LL_GRAPH_FAULT_MEMCHECK=0 \
  LL_BIBLE_EXTRA="--set model.d_model=64 --set model.ffn_dim=128 --set model.enc_layers=1 --set model.dec_layers=1 --set train.valid_max_batches=4 --set data.max_tokens=256"
have_corpus=1
[ -s "$SRC/data/bible/raw/test.en" ] || have_corpus=0
steps=tests,sanitize
[ $have_corpus = 1 ] && steps=tests,long,graphfault,sanitize

# 1. everything passes
t0=$(date +%s)
GPU_CHECK_STEPS=$steps bash "$SRC/scripts/gpu_check.sh" "$W/a" > "$W/a.out" 2>&1 || true
S=$W/a/summary.txt
echo "rehearsal 1 ($steps): $(($(date +%s) - t0)) s"
sed 's/^/  | /' "$S"
# every step ran and passed, but nvidia-smi (none here)
grep -E '^[a-z0-9_-]+ +rc ' "$S" | grep -v '^nvidia-smi ' | grep -v ' rc 0 ' && bad "a step of run 1 did not pass"
for s in configure build ctest-gpu; do grep -qE "^$s +rc 0 " "$S" || bad "run 1 has no passing $s step"; done
if [ $have_corpus = 1 ]; then
  for s in decode-parity bible300 graph-fault; do grep -qE "^$s +rc 0 " "$S" || bad "run 1 has no passing $s step"; done
  grep -q '^  graph-fault: repro' "$S" || bad "the graphfault step's variants are not in the summary"
fi
grep -qE 'tests passed|Test +#' "$W/a/logs/ctest-gpu.log" || bad "ctest-gpu ran no test"
# memcheck on each selected quick test, as ctest runs it
for t in gpu_smoke graph_cond_cuda layernorm_cuda decode_cuda ops_cuda_bf16; do
  grep -qE "^memcheck-$t +rc 0 " "$S" || bad "no passing memcheck-$t"
done
[ "$(grep -cE '^memcheck-' "$S")" = 5 ] || bad "memcheck ran on other tests than the 5 selected"
grep -q 'EMULATED rehearsal: no compute-sanitizer ran (memcheck)' "$W/a/logs/memcheck-gpu_smoke.log" ||
  bad "memcheck-gpu_smoke did not go through the stand-in"
grep -q 'bf16 activations' "$W/a/logs/memcheck-ops_cuda_bf16.log" ||
  bad "memcheck-ops_cuda_bf16 ran without its ctest environment (LL_PARITY_PRECISION=bf16)"
for tool in racecheck synccheck; do
  for t in layernorm_cuda ops_cuda_bf16; do grep -qE "^$tool-$t +rc 0 " "$S" || bad "no passing $tool-$t"; done
done
grep -q '^  cuda devices: 1' "$S" || bad "lltrain --devices is not in the summary"

# 2. failing tests are named and run again: the sync check, then without PDL
t0=$(date +%s)
steps2=tests
[ $have_corpus = 1 ] && steps2=tests,long
LL_CUDA_EMU_LT_REFUSE=fail GPU_CHECK_STEPS=$steps2 bash "$SRC/scripts/gpu_check.sh" "$W/b" > "$W/b.out" 2>&1 || true
S=$W/b/summary.txt
echo "rehearsal 2 ($steps2, every matmul failing): $(($(date +%s) - t0)) s"
sed 's/^/  | /' "$S"
grep -qE '^ctest-gpu +rc [1-9][0-9]* .*FAILED' "$S" || bad "run 2's ctest-gpu did not fail"
grep -qE '^sync-check +rc ' "$S" || bad "run 2 ran no sync check of the failed tests"
grep -qE '^nopdl-check +rc ' "$S" || bad "run 2 ran the failed tests not again without PDL"
grep -q 'gpu_test_ops_cuda_bf16' "$W/b/logs/nopdl-check.log" || bad "the nopdl check did not run the failed ops test"
if [ $have_corpus = 1 ]; then
  grep -qE '^decode-parity +rc [1-9]' "$S" || bad "run 2's decode-parity did not fail"
  grep -qE '^graph-fault +rc ' "$S" || bad "a failed decode-parity was not followed by the graphfault variants"
fi

# 3. the second call's steps, GPU_CHECK_TRAIN_MIN=full as a GPU session runs them, on tiny sizes:
# the quick start (a 2+2-layer model, 2 updates without validation BLEU, 3 test lines) and the bench step without
# PyTorch (its decoding benches on the same 2+2 layers, a vocabulary of 2,500: the shortlist's 2,000 fit)
if [ $have_corpus = 1 ]; then
  t0=$(date +%s)
  tiny="--set model.enc_layers=2 --set model.dec_layers=2 --set model.d_model=64 --set model.ffn_dim=128 --set model.heads=2"
  GPU_CHECK_STEPS=quickstart,bench GPU_CHECK_TRAIN_MIN=full GPU_CHECK_TORCH=0 GPU_CHECK_TEST_LINES=3 \
    GPU_CHECK_QUICKSTART_ARGS="$tiny --set train.max_updates=2 --set data.max_tokens=256 --set train.valid_max_batches=2 --set train.valid_bleu=false --set train.best_metric=loss" \
    GPU_CHECK_BENCH_ARGS="--batch 4 --len 8 --vocab 64 --steps 2 --warmup 1 $tiny" \
    GPU_CHECK_DECODE_ARGS="--batch 2 --src-len 4 --len 4 --repeats 1 --vocab 2500 $tiny" \
    bash "$SRC/scripts/gpu_check.sh" "$W/c" > "$W/c.out" 2>&1 || true
  S=$W/c/summary.txt
  echo "rehearsal 3 (quickstart,bench on tiny sizes): $(($(date +%s) - t0)) s"
  sed 's/^/  | /' "$S"
  grep -E '^[a-z0-9_-]+ +rc ' "$S" | grep -v '^nvidia-smi ' | grep -v ' rc 0 ' && bad "a step of run 3 did not pass"
  for s in train-bible decode-test bench-ll-ll64 bench-ll-ll64-profile bench-decode bench-decode-profile \
    bench-decode-serial bench-decode-sample bench-decode-sample-top10 bench-decode-ensemble bench-decode-norepeat \
    bench-decode-diverse bench-decode-siblings bench-decode-shortlist bench-ll-ll64-recompute \
    bench-ll-base bench-ll-deep30; do
    grep -qE "^$s +rc 0 " "$S" || bad "run 3 has no passing $s step"
  done
  grep -qE '^  test books \(en->es\), beam 5, full min of training: [0-9.]+ [0-9.]+ \(BLEU chrF\)' "$S" ||
    bad "run 3's summary has no BLEU and chrF of the test lines"
  grep -q '^  class ' "$S" || bad "run 3's summary has no per-op-class profile"
  grep -q '^  decode class ' "$S" || bad "run 3's summary has no per-op-class profile of beam-5 decoding"
  grep -q 'RESULT ll_decode beam=5 .*shortlist=2000 ' "$W/c/logs/bench-decode-shortlist.log" ||
    bad "bench-decode-shortlist: no RESULT line with shortlist=2000"
  # each A/B of the bench step: a switch the RESULT line shows must show there; the others must be
  # read somewhere in the sources (an environment variable nobody reads would time the default)
  result() { grep -h '^RESULT ll_gpu_train' "$W/c/logs/bench-ll-$1.log" 2> /dev/null; }
  want() { result "$1" | grep -q " $2 " || bad "bench-ll-$1: its RESULT line lacks '$2': $(result "$1")"; }
  want ll64 "pdl=on"
  want ll64 "side_stream=on"
  want ll64 "relu_mask=off"
  want ll64-nopdl "pdl=off"
  want ll64-noside "side_stream=off"
  want ll64-relumask "relu_mask=drelu"
  want ll64-nographs "graphs=off"
  want ll64 "bgrad=kernel"
  want ll64-bgradepi "bgrad=epilogue"
  result ll64 | grep -q ' recompute=off$' || bad "bench-ll-ll64: not the default (recompute=off): $(result ll64)"
  result ll64-recompute | grep -q ' recompute=on$' || bad "bench-ll-ll64-recompute did not recompute: $(result ll64-recompute)"
  result ll64-join1 | grep -q ' layers_per_join=1\( \|$\)' || bad "bench-ll-ll64-join1: not joined after every layer"
  abs=$(awk '/for ab in /{f=1} f{print} f && /; do$/{exit}' "$SRC/scripts/gpu_check.sh" | tr ' \\;' '\n\n\n' |
    grep -E '^[a-z0-9]+:[A-Z0-9_]+=')
  [ "$(echo "$abs" | wc -l)" -ge 9 ] || bad "the bench step's A/B list was not found: $abs"
  for ab in $abs LL_CUDA_GEMM_TUNE=8 LL_CUDA_DECODE_GRAPHS=0 LL_CUDA_ATTENTION=simt; do
    var=${ab#*:}
    var=${var%%=*}
    grep -rqF "\"$var\"" "$SRC/src" "$SRC/kernels" "$SRC/include" || bad "A/B ${ab}: no source reads $var"
    [ "${ab%%:*}" = "$ab" ] || grep -qE "^bench-ll-ll64-${ab%%:*} +rc 0 " "$S" || bad "no passing bench-ll-ll64-${ab%%:*}"
  done
fi

# 4. every LL_* variable the two GPU scripts set is read somewhere: a C/CUDA source's "NAME" or
# a shell script's $NAME (a misspelt switch would time the default and call it an A/B)
for f in scripts/gpu_check.sh bench/gpu/run.sh; do
  for var in $(grep -v '^\s*#' "$SRC/$f" | grep -oE '\bLL_[A-Z0-9_]+=' | tr -d = | sort -u); do
    grep -rqF "\"$var\"" "$SRC/src" "$SRC/kernels" "$SRC/include" "$SRC/tests" "$SRC/bench" ||
      grep -rqE "\\\$\{?$var\b" "$SRC/scripts" "$SRC/tests" "$SRC/bench" || bad "$f sets $var, which nothing reads"
  done
done

if [ $fail = 0 ]; then echo "rehearsal: PASS (an emulated rehearsal of scripts/gpu_check.sh, not a GPU result)"; fi
exit $fail
