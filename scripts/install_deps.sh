#!/usr/bin/env bash
# Install what ll needs to build, test and run the quick start (Debian 12).
# Idempotent: skips apt when everything is already there.
set -euo pipefail
PKGS=(build-essential cmake pkg-config python3 libopenblas-dev libyaml-dev libsentencepiece-dev sentencepiece
      libopenmpi-dev openmpi-bin diatheke sword-text-web sword-text-sparv python3-pip python3-venv python3-matplotlib)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
