#!/usr/bin/env bash
# Where recording time goes in real training (issue 5's overhead): runs gpt2 and resnet50
# under gpumem with the trace and Python stacks and GPUMEM_VERBOSE=1, so the recorder
# prints the time it took on the allocating threads (stack captures, GIL taken back,
# records) against the run's wall time.
# Keeps the traces, whose stacks and threads say how deep the stacks are and which
# threads pay for a stack (gpumem dump --stacks). Builds libgpumem.so and libgpumem_torch.so
# (which links allocations to autograd; without it backward threads still take the GIL).
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
  && cmake --build "$build" -j"$(nproc)" --target gpumem_shared gpumem_torch >>"$OUT/profile-build.log" 2>&1 \
  || { echo "build failed"; tail -30 "$OUT/profile-build.log"; exit 1; }
for w in ${PROFILE_WORKLOADS:-gpt2 resnet50}; do
  GPUMEM_TRACE=$OUT/$w-python.gpumem GPUMEM_STACKS=python GPUMEM_VERBOSE=1 \
    $py "$repo/tests/gpu/capture.py" "$w" --allocator gpumem --steps "${PROFILE_STEPS:-30}" \
    >"$OUT/$w-capture.json" 2>"$OUT/$w.err" || echo "$w failed (see $w.err)"
  echo "== $w: $(grep -h 'recording cost' "$OUT/$w.err")"
  $py -c 'import json,sys; r=json.load(open(sys.argv[1])); print("median step ms", round(r["median_step_seconds"]*1e3, 2), "steps", r["steps"])' "$OUT/$w-capture.json"
done
ls -la "$OUT"
