#!/usr/bin/env bash
# Copies this machine's (Debian 12) `perf` and the libraries it needs that the GPU machine
# lacks into third_party/perf (ignored by git), for profiling a training run there:
# carry ["third_party/prebuilt", "third_party/perf"] and run
# `PROFILE_PERF=1 tests/gpu/recording_profile.sh` (which finds it there). The GPU
# machine's own C and C++ runtimes are kept: only perf's other libraries travel (~27 MB).
# Needs the linux-perf package here (apt-get install linux-perf).
set -euo pipefail
cd "$(dirname "$0")/.."
perf=$(command -v perf) || { echo "make-device-perf: no perf here (apt-get install linux-perf)" >&2; exit 1; }
rm -rf third_party/perf
mkdir -p third_party/perf/lib
cp -L "$perf" third_party/perf/perf
for l in $(ldd "$perf" | awk '$3 ~ /^\// {print $3}'); do
  case $(basename "$l") in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|libz.so*|libcrypt*) ;;
    *) cp -L "$l" third_party/perf/lib/ ;;
  esac
done
du -sh third_party/perf
