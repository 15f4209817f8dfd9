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
#        resnet50"), PROFILE_STEPS (default 30), GPUMEM_PREBUILT as in run.sh,
#        PROFILE_PERF=1 (where `perf` works: sample the whole run, and write the hottest
#        symbols, and gpumem's own, to $OUT/WORKLOAD.perf.txt)
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
perf_cmd=()
if [ "${PROFILE_PERF:-0}" = 1 ]; then
  if perf record -q -o /dev/null true 2>/dev/null; then
    perf_cmd=(perf record -q -F 2000 -o)
  else
    echo "PROFILE_PERF=1: perf is missing or not allowed here; profiling without it"
  fi
fi
for w in ${PROFILE_WORKLOADS:-gpt2 resnet50}; do
  GPUMEM_TRACE=$OUT/$w-python.gpumem GPUMEM_STACKS=python GPUMEM_VERBOSE=1 \
    ${perf_cmd[@]+"${perf_cmd[@]}" "$OUT/$w.perf.data"} \
    $py "$repo/tests/gpu/capture.py" "$w" --allocator gpumem --steps "${PROFILE_STEPS:-30}" \
    >"$OUT/$w-capture.json" 2>"$OUT/$w.err" || echo "$w failed (see $w.err)"
  echo "== $w: $(grep -h 'recording cost' "$OUT/$w.err")"
  if [ -f "$OUT/$w.perf.data" ]; then
    { perf report -i "$OUT/$w.perf.data" --no-children --sort dso,symbol 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | head -40
      echo "== gpumem's own"
      perf report -i "$OUT/$w.perf.data" --no-children --sort dso,symbol 2>/dev/null \
        | grep -E 'libgpumem' | head -40; } | cut -c1-200 >"$OUT/$w.perf.txt"
    # Where inside the recording path the samples land (instruction by instruction).
    for sym in gpumem::TraceWriter::Append gpumem::Recorder::OnEvent; do
      perf annotate -i "$OUT/$w.perf.data" --stdio -s "$sym" 2>/dev/null | head -300
    done >"$OUT/$w.annotate.txt"
    rm -f "$OUT/$w.perf.data"
  fi
  $py -c 'import json,sys; r=json.load(open(sys.argv[1])); print("median step ms", round(r["median_step_seconds"]*1e3, 2), "steps", r["steps"])' "$OUT/$w-capture.json"
done
ls -la "$OUT"
