#!/usr/bin/env bash
# The test command: install dependencies, build with -Werror from scratch in
# build-test/, run the whole test suite.  GPU tests skip when there is no GPU.
# Then the CPU suite again in build-asan/ under AddressSanitizer +
# UndefinedBehaviorSanitizer (docs/reliability.md); LL_TEST_SANITIZE=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DLL_WERROR=ON
cmake --build build-test -j"$(nproc)"
(cd build-test && ctest --output-on-failure -j2 --timeout 900)
if [ "${LL_TEST_SANITIZE:-1}" != 0 ]; then
  # No -Werror here: gcc's -fsanitize instrumentation causes false warnings
  # (-Wformat-truncation); build-test above already enforces warnings.
  start=$SECONDS
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DLL_CUDA=OFF -DLL_SANITIZE=address,undefined
  cmake --build build-asan -j"$(nproc)"
  (cd build-asan && ctest --output-on-failure -j2 --timeout 1800)
  echo "sanitizer build and tests: $((SECONDS - start)) s"
fi
