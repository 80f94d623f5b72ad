#!/usr/bin/env bash
# The aarch64 build (everything but CUDA and MPI), cross-compiled with -Werror
# on a Debian 12 x86-64 machine, and its fast unit tests (kernels, gradient
# checks, BLEU/chrF, config, checkpoint, data) run under qemu-user.  Proves
# that no x86 intrinsic leaks into a non-x86 build (immintrin.h does not exist
# there) and that the portable kernels compute right on another ISA.
#   scripts/cross_aarch64.sh [BUILD_DIR]     (default build-aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-aarch64}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
fi
PKGS=(crossbuild-essential-arm64 qemu-user libopenblas-dev:arm64 libyaml-dev:arm64 libgomp1:arm64 libstdc++6:arm64)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
# sentencepiece's arm64 packages are not Multi-Arch: same -- installing them
# would remove the amd64 ones -- so they are unpacked into a private root.
mkdir -p "$B"
ROOT=$(cd "$B" && pwd)/sysroot
if [ ! -f "$ROOT/usr/lib/aarch64-linux-gnu/pkgconfig/sentencepiece.pc" ]; then
  mkdir -p "$B/debs" "$ROOT"
  chmod 777 "$B/debs" # apt downloads as _apt when it can
  (cd "$B/debs" && apt-get download libsentencepiece0:arm64 libsentencepiece-dev:arm64 2> /dev/null)
  for d in "$B"/debs/*.deb; do dpkg -x "$d" "$ROOT"; done
  sed -i "s|^prefix=/usr\$|prefix=$ROOT/usr|" "$ROOT/usr/lib/aarch64-linux-gnu/pkgconfig/sentencepiece.pc"
fi
cmake -S . -B "$B" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake -DLL_AARCH64_SYSROOT="$ROOT" \
  -DCMAKE_BUILD_TYPE=Release -DLL_WERROR=ON -DLL_CUDA=OFF -DLL_MPI=OFF -DLL_NATIVE=OFF > /dev/null
cmake --build "$B" -j"$(nproc)"
# the single-process tests (label unit), run by ctest under qemu-aarch64 (the
# toolchain's CMAKE_CROSSCOMPILING_EMULATOR); the CLI tests start ll tools
# from shell scripts, which would need binfmt_misc, and run on x86 instead
(cd "$B" && ctest --output-on-failure -j"$(nproc)" --timeout 900 -L unit)
