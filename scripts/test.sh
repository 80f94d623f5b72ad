#!/usr/bin/env bash
# The test command: install dependencies, build with -Werror from scratch in
# build-test/, run the whole test suite.  GPU tests skip when there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DLL_WERROR=ON
cmake --build build-test -j"$(nproc)"
cd build-test
ctest --output-on-failure -j2 --timeout 900
