#!/usr/bin/env bash
# The GPU tests without a GPU: builds the CUDA backend on the CPU emulation of
# CUDA (-DLL_CUDA_EMU=ON, tests/cuda_emu; docs/cuda-emulation.md) into its own build folder and
# runs every test labelled gpu.
#
#   scripts/cuda_emu_test.sh plain   build-emu-plain: ctest -L gpu (schedule rr), then the kernel and
#                                    op tests again under a fourth schedule (random:SEED; without
#                                    attention's 65,537-sentence case, which checks the host's slicing),
#                                    then scripts/gpu_check.sh rehearsed on that build
#                                    (tests/cuda_emu/gpu_check_rehearsal.sh)
#   scripts/cuda_emu_test.sh asan    build-emu-asan:  every gpu test under ASan+UBSan (greedy)
#   scripts/cuda_emu_test.sh tsan    build-emu-tsan:  every gpu test but the variants of others (label
#                                    variant) under TSan (CUDA threads as TSan
#                                    fibers, only __syncthreads ordering them; schedule reverse), built
#                                    with clang when it is installed: LLVM 14's TSan runtime (fixed-size
#                                    vector clocks) runs the fibers' barriers 2.1x faster than gcc 12's
#   scripts/cuda_emu_test.sh mutants the mutation tests (tests/cuda_emu/mutants.sh, an ASan copy)
# The shell tests (lltrain/lldecode end to end: gpu_test_bible300, _decode_parity, _resume_cuda,
# _dist_nccl_mpirun, _tf32) run in every mode, with half-size batches under the sanitizers
# (cmake/cuda_emu_tests.cmake).
#
# Environment: JOBS (build jobs, default 2), LL_EMU_CTEST_JOBS (tests at once, default 2), LL_EMU_CMAKE_ARGS (extra cmake
# arguments, e.g. the compilers), LL_EMU_BUILD_ROOT (default: the source tree),
# LL_EMU_SEED (the random schedule's seed, default 1).  Exit status: 0 when
# every gpu test passed (none may skip), else 1.
# With ccache installed (scripts/test.sh installs it) the asan mode and the mutants' ASan copy
# compile through one cache, build-emu-ccache: the copy then takes the asan build's objects
# instead of compiling the tree a second time (~2 minutes of CI's 2 cores).
set -euo pipefail
mode=${1:-}
SRC=$(cd "$(dirname "$0")/.." && pwd)
root=${LL_EMU_BUILD_ROOT:-$SRC}
jobs=${JOBS:-2}
# tests at once: the emulation runs a kernel on one thread, so two tests fill two cores
ctest_jobs=${LL_EMU_CTEST_JOBS:-2}
case $mode in
  plain | mutants) bld=$root/build-emu-plain san=() ;;
  asan) bld=$root/build-emu-asan san=(-DLL_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  tsan)
    bld=$root/build-emu-tsan san=(-DLL_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo)
    # clang's TSan runtime where there is one (the fiber switches and barrier clocks dominate)
    if command -v clang > /dev/null && command -v clang++ > /dev/null &&
      [[ "${LL_EMU_CMAKE_ARGS:-}" != *CMAKE_C_COMPILER* ]]; then
      san+=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
    fi
    ;;
  *)
    echo "usage: $0 plain|asan|tsan|mutants" >&2
    exit 2
    ;;
esac
# ccache for the two ASan builds (asan, then the mutants' copy of the tree): base_dir makes the
# paths in the compile commands relative, so the copy (whose build folder sits one level inside
# it, as build-emu-asan does here) gets the same hashes; hash_dir=false shares the -g objects
# between the two folders (the copy's unmutated objects then name this tree's files in debug info
# and __FILE__: the same text); depend mode hashes from the compiler's -MD output without running
# the preprocessor on a miss.  The cache is keyed on the sources' contents, so a mutated file is
# always compiled; restoring it after its mutant is a hit.  A LL_EMU_BUILD_ROOT outside the tree
# puts the copy outside base_dir: no hits, only slower.  Without ccache the launcher is set
# empty, so a folder configured with it builds again.
launcher=
if [[ $mode == asan || $mode == mutants ]] && command -v ccache > /dev/null; then
  launcher=ccache
  export CCACHE_DIR=$root/build-emu-ccache CCACHE_BASEDIR=$SRC CCACHE_NOHASHDIR=1 CCACHE_DEPEND=1 \
    CCACHE_MAXSIZE=1G
fi
if [ "$mode" = asan ]; then
  san+=("-DCMAKE_C_COMPILER_LAUNCHER=$launcher" "-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher")
fi
t0=$(date +%s)
# shellcheck disable=SC2086
# a folder configured with other compilers is built afresh (cmake would keep its cache)
if [ -f "$bld/CMakeCache.txt" ] && [[ " ${san[*]}" == *CMAKE_CXX_COMPILER=clang++* ]] &&
  ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++" "$bld/CMakeCache.txt"; then
  rm -rf "$bld"
fi
mkdir -p "$bld"
cmake -S "$SRC" -B "$bld" -DLL_CUDA_EMU=ON "${san[@]}" ${LL_EMU_CMAKE_ARGS:-} > "$bld/emu-cmake.log" 2>&1 ||
  { cat "$bld/emu-cmake.log"; exit 1; }
# only what the gpu tests run: the test programs and the tools the shell tests call
targets=(lltrain lldecode llprep lleval ll_gpu_bench)
for f in "$SRC"/tests/gpu/test_*.c; do targets+=("gpu_$(basename "$f" .c)"); done
cmake --build "$bld" -j"$jobs" --target "${targets[@]}" > "$bld/emu-build.log" 2>&1 ||
  { tail -40 "$bld/emu-build.log"; exit 1; }
echo "cuda-emu $mode: built in $(($(date +%s) - t0)) s ($bld)"

# the second schedule of plain mode: the kernel-level tests (the whole suite runs under rr
# here, greedy under ASan and reverse under TSan)
RANDOM_TESTS='gpu_test_(ops_cuda|ops_cuda_bf16|layernorm_cuda|attention_cuda|decode_cuda|typed_cuda)$'
# run_ctest SCHEDULE [ctest args]: ctest -L gpu; a skipped test is a failure here (the emulation is a device)
run_ctest() {
  local sched=$1 t1 log
  shift
  t1=$(date +%s)
  log=$bld/ctest-$mode-${sched//:/-}.log
  if LL_CUDA_EMU_SCHEDULE=$sched ctest --test-dir "$bld" -L gpu --output-on-failure --timeout 1500 -j"$ctest_jobs" \
    "$@" > "$log" 2>&1; then
    rc=0
  else
    rc=1
  fi
  if grep -q "Not Run\|\*\*\*Skipped" "$log"; then
    echo "cuda-emu $mode: a gpu test skipped under the emulation:" >&2
    grep "Not Run\|Skipped" "$log" >&2
    rc=1
  fi
  grep -E "tests passed|Test +#" "$log" | sed "s/^/  [$sched] /"
  echo "cuda-emu $mode: schedule $sched: $([ $rc = 0 ] && echo PASS || echo FAIL) in $(($(date +%s) - t1)) s ($log)"
  return $rc
}

status=0
case $mode in
  plain)
    run_ctest rr || status=1
    # (without the 65,537-sentence attention case: it checks the host's gridDim.z slices, not an
    # interleaving, and ran under rr; ~100 s under this schedule)
    LL_GPU_TEST_BIG_BATCH=0 run_ctest "random:${LL_EMU_SEED:-1}" -R "$RANDOM_TESTS" || status=1
    # scripts/gpu_check.sh itself, rehearsed on this build (~1 minute): a mistake in it must not
    # cost a GPU session its minutes
    t1=$(date +%s)
    if bash "$SRC/tests/cuda_emu/gpu_check_rehearsal.sh" "$bld" > "$bld/gpu-check-rehearsal.log" 2>&1; then
      echo "cuda-emu $mode: gpu_check.sh rehearsal PASS in $(($(date +%s) - t1)) s"
    else
      tail -60 "$bld/gpu-check-rehearsal.log"
      echo "cuda-emu $mode: gpu_check.sh rehearsal FAIL ($bld/gpu-check-rehearsal.log)"
      status=1
    fi
    ;;
  asan)
    # the fibers' stacks are switched with ASan's fiber annotations
    export ASAN_OPTIONS=detect_leaks=0:detect_stack_use_after_return=0
    run_ctest greedy || status=1
    ;;
  tsan)
    # one OpenMP thread: libgomp is not instrumented (its barriers would be false races)
    # (clang's runtime then suggests ignore_noninstrumented_modules: not taken, so memcpy calls inside
    # MPI on our buffers stay checked)
    export OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    run_ctest reverse -LE variant || status=1 # (label variant: cmake/cuda_emu_tests.cmake)
    ;;
  mutants)
    LL_EMU_LAUNCHER=$launcher bash "$SRC/tests/cuda_emu/mutants.sh" "$bld" || status=1
    ;;
esac
echo "cuda-emu $mode: $([ $status = 0 ] && echo PASS || echo FAIL), $(($(date +%s) - t0)) s in all"
exit $status
