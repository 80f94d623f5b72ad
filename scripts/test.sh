#!/usr/bin/env bash
# The test command (CI runs it through .ci/run): installs the dependencies,
# then builds from scratch and tests, each build in its own folder:
#   1. build-test      native (-march=native, CUDA when nvcc is there), -Werror,
#                      the whole suite (GPU tests skip without a GPU);
#   2. build-portable  -DLL_NATIVE=OFF -mno-avx512f, the CPU suite (but label script: the
#                      Python scripts' tests, which run no ll program and ran in 1) with
#                      LL_CPU_KERNELS=generic: ll's portable kernels and an AVX2
#                      BLAS core, as on a machine without AVX-512, on every machine
#                      (cli_test_portable_isa: no AVX outside the AVX-512 kernels);
#                      then its unit tests on an emulated Haswell (qemu-x86_64);
#   3. build-clang     clang 14, -Werror, the single-process tests (label unit);
#   4. build-aarch64   cross build for aarch64, -Werror, unit tests under qemu-user
#                      (scripts/cross_aarch64.sh);
#   5. build-asan      the CPU suite (but label script) under AddressSanitizer + UBSan
#                      (docs/reliability.md);
#   6. build-emu-*     the CUDA backend on the CPU emulation of CUDA, cuBLASLt, CUB and
#                      NCCL (scripts/cuda_emu_test.sh): every gpu test, plain (two warp
#                      schedules), under ASan+UBSan and under TSan, then the mutation tests
#                      (docs/cuda-emulation.md).
# LL_TEST_SKIP="portable clang aarch64 asan emu" leaves out any of 2-6 (for a
# quick local run; CI runs everything).  Each part's time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
# what only the tests need: qemu-user (emulated Haswell and aarch64), clang, ccache (the
# mutation tests' ASan copy of the tree reuses the emulation's ASan objects through it)
test_pkgs=()
for p in qemu-user clang ccache; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || test_pkgs+=("$p")
done
if [ ${#test_pkgs[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${test_pkgs[@]}" > /dev/null
fi
skip=" ${LL_TEST_SKIP:-} "
[ "${LL_TEST_SANITIZE:-1}" = 0 ] && skip="$skip asan " # the old switch
summary=()
part() { # part NAME COMMAND...: run unless skipped, record its time
  local name=$1 start=$SECONDS
  shift
  if [[ "$skip" == *" $name "* ]]; then
    summary+=("$name: skipped (LL_TEST_SKIP)")
    return
  fi
  echo "=== $name"
  "$@"
  summary+=("$name: $((SECONDS - start)) s")
}

native() {
  cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DLL_WERROR=ON
  cmake --build build-test -j"$(nproc)"
  (cd build-test && ctest --output-on-failure -j2 --timeout 900)
}

portable() {
  cmake -S . -B build-portable -DCMAKE_BUILD_TYPE=Release -DLL_WERROR=ON -DLL_CUDA=OFF -DLL_NATIVE=OFF \
    -DCMAKE_C_FLAGS=-mno-avx512f -DCMAKE_CXX_FLAGS=-mno-avx512f
  cmake --build build-portable -j"$(nproc)"
  local core=()
  grep -qw avx2 /proc/cpuinfo && core=(OPENBLAS_CORETYPE=Haswell)
  (cd build-portable && env LL_CPU_KERNELS=generic "${core[@]}" ctest --output-on-failure -j2 --timeout 900 -LE script)
  # The same binaries on an emulated CPU without AVX-512 (qemu-x86_64 -cpu
  # Haswell: AVX2 + FMA): the kernels are chosen from its CPUID, OpenBLAS picks
  # its Haswell core, and any AVX-512 instruction the compiler let slip in is a
  # SIGILL (a -march=native build dies there at once).  The single-process tests but
  # the FLOP-heavy ones (label heavy: a minute or more each of emulated AVX2, the same paths
  # the run above took; cli_test_portable_isa reads every function's instructions off the build).
  cmake -S . -B build-portable "-DCMAKE_CROSSCOMPILING_EMULATOR=qemu-x86_64;-cpu;Haswell" > /dev/null
  (cd build-portable && ctest --output-on-failure -j2 --timeout 900 -L unit -LE heavy)
  cmake -S . -B build-portable -DCMAKE_CROSSCOMPILING_EMULATOR= > /dev/null
}

clang_build() {
  CC=clang CXX=clang++ cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DLL_WERROR=ON -DLL_CUDA=OFF
  cmake --build build-clang -j"$(nproc)"
  (cd build-clang && ctest --output-on-failure -j2 --timeout 900 -L unit)
}

asan() {
  # No -Werror here: gcc's -fsanitize instrumentation causes false warnings
  # (-Wformat-truncation); the builds above already enforce warnings.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DLL_CUDA=OFF -DLL_SANITIZE=address,undefined
  cmake --build build-asan -j"$(nproc)"
  (cd build-asan && ctest --output-on-failure -j2 --timeout 1800 -LE script)
}

emu() {
  # the shell GPU tests train and decode on the Bible corpus (~40 s to build)
  [ -f data/bible/raw/test.en ] || python3 scripts/make_bible_corpus.py --out data/bible/raw
  for mode in plain asan tsan mutants; do scripts/cuda_emu_test.sh "$mode"; done
}

part native native
part portable portable
part clang clang_build
part aarch64 scripts/cross_aarch64.sh build-aarch64
part asan asan
part emu emu
echo "=== all passed"
printf '  %s\n' "${summary[@]}"
