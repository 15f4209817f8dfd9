#!/usr/bin/env bash
# Installs what gpumem needs on Debian 12 (apt), skipping what is already there.
# The CUDA 13 toolkit is expected at /usr/local/cuda (or wherever CMake's FindCUDAToolkit
# finds it); without it the CUDA parts are simply not built.
set -euo pipefail
packages=(build-essential cmake pkg-config libabsl-dev libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev libcli11-dev liblzma-dev zlib1g-dev libzstd-dev
          libprotobuf-dev protobuf-compiler  # gpumem export --format pprof (optional)
          clang chromium
          python3-venv python3-setuptools python3-wheel)  # pip install --no-build-isolation .
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
