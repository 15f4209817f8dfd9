#!/usr/bin/env bash
# Where recording time goes in real training (issue 5's overhead): runs gpt2 and resnet50
# under gpumem with the trace and Python stacks, under `perf record` where the machine has
# perf, and keeps the traces, whose stacks and threads say how deep the stacks are and
# which threads pay for a stack (tools: gpumem dump). Builds libgpumem.so only.
#
# usage: tests/gpu/recording_profile.sh   env: OUT, PROFILE_WORKLOADS (default "gpt2
#        resnet50"), PROFILE_STEPS (default 30), GPUMEM_PREBUILT as in run.sh
set -uo pipefail
source "$(dirname "$0")/env.sh"
torch_prefix=$($py -c 'import torch;print(torch.utils.cmake_prefix_path)')
arch=$prebuilt/lib/x86_64-linux-gnu
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGPUMEM_SANITIZERS=OFF \
  -DCMAKE_PREFIX_PATH="$prebuilt;$torch_prefix" -DPython3_EXECUTABLE="$py" \
  -DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu -DLIBLZMA_LIBRARY="$arch/liblzma.so" \
  -DZLIB_LIBRARY="$arch/libz.so" -DLIBLZMA_INCLUDE_DIR="$prebuilt/include" \
  -DZLIB_INCLUDE_DIR="$prebuilt/include" >"$OUT/profile-build.log" 2>&1 \
  && cmake --build "$build" -j"$(nproc)" --target gpumem_shared >>"$OUT/profile-build.log" 2>&1 \
  || { echo "build failed"; tail -30 "$OUT/profile-build.log"; exit 1; }
perf=$(command -v perf || true)
echo "perf: ${perf:-not on this machine}"
for w in ${PROFILE_WORKLOADS:-gpt2 resnet50}; do
  run=("$py" "$repo/tests/gpu/capture.py" "$w" --allocator gpumem --steps "${PROFILE_STEPS:-30}")
  if [ -n "$perf" ]; then
    GPUMEM_TRACE=$OUT/$w-python.gpumem GPUMEM_STACKS=python \
      "$perf" record -F 4000 -g -o "$OUT/$w.perf" -- "${run[@]}" >/dev/null 2>>"$OUT/profile.err"
    "$perf" report -i "$OUT/$w.perf" --no-children --sort dso,symbol 2>/dev/null \
      | grep -E '^ +[0-9]' | head -60 >"$OUT/$w-perf-top.txt"
    rm -f "$OUT/$w.perf"
    echo "== $w: top symbols with the trace (python stacks)"; head -40 "$OUT/$w-perf-top.txt"
  else
    GPUMEM_TRACE=$OUT/$w-python.gpumem GPUMEM_STACKS=python "${run[@]}" \
      >/dev/null 2>>"$OUT/profile.err" || echo "$w failed (see profile.err)"
  fi
done
ls -la "$OUT"
