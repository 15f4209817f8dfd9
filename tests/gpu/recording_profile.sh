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
#        PROFILE_PERF=1: sample PROFILE_PERF_SECONDS (default 8) of steady steps with perf
#        (on PATH, else third_party/perf from scripts/make-device-perf.sh, carried), after
#        PROFILE_PERF_DELAY (default 30) seconds of start-up, in a run of 1500 steps (~1 min
#        on an H100; it runs to its end, for the recorder's own figures), and
#        write the main and autograd threads' hottest symbols and gpumem's own to
#        $OUT/WORKLOAD.perf.txt; the libraries are built with frame pointers and perf
#        records call graphs, so it also lists gpumem's entry points inclusive of what
#        they call (C runtime, clock, locks)
set -uo pipefail
source "$(dirname "$0")/env.sh"
torch_prefix=$($py -c 'import torch;print(torch.utils.cmake_prefix_path)')
arch=$prebuilt/lib/x86_64-linux-gnu
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGPUMEM_SANITIZERS=OFF \
  -DCMAKE_PREFIX_PATH="$prebuilt;$torch_prefix" -DPython3_EXECUTABLE="$py" \
  -DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu -DLIBLZMA_LIBRARY="$arch/liblzma.so" \
  -DZLIB_LIBRARY="$arch/libz.so" -DLIBLZMA_INCLUDE_DIR="$prebuilt/include" \
  -DZLIB_INCLUDE_DIR="$prebuilt/include" \
  -DCMAKE_CXX_FLAGS="$([ "${PROFILE_PERF:-0}" = 1 ] && echo -fno-omit-frame-pointer)" \
  >"$OUT/profile-build.log" 2>&1 \
  && cmake --build "$build" -j"$(nproc)" --target gpumem_shared gpumem_torch >>"$OUT/profile-build.log" 2>&1 \
  || { echo "build failed"; tail -30 "$OUT/profile-build.log"; exit 1; }
perf=()
if [ "${PROFILE_PERF:-0}" = 1 ]; then
  if command -v perf >/dev/null; then
    perf=(perf)
  elif [ -x "$repo/third_party/perf/perf" ]; then
    perf=(env "LD_LIBRARY_PATH=$repo/third_party/perf/lib:$LD_LIBRARY_PATH"
          "$repo/third_party/perf/perf")
  fi
  if [ ${#perf[@]} -eq 0 ] || ! "${perf[@]}" record -q -o /dev/null true 2>/dev/null; then
    echo "PROFILE_PERF=1: no working perf (scripts/make-device-perf.sh); profiling without it"
    perf=()
  fi
fi
for w in ${PROFILE_WORKLOADS:-gpt2 resnet50}; do
  steps=${PROFILE_STEPS:-30}
  [ ${#perf[@]} -gt 0 ] && steps=1500
  GPUMEM_TRACE=$OUT/$w-python.gpumem GPUMEM_STACKS=python GPUMEM_VERBOSE=1 \
    $py "$repo/tests/gpu/capture.py" "$w" --allocator gpumem --steps "$steps" \
    >"$OUT/$w-capture.json" 2>"$OUT/$w.err" &
  pid=$!
  if [ ${#perf[@]} -gt 0 ]; then
    sleep "${PROFILE_PERF_DELAY:-30}"
    "${perf[@]}" record -q -g -F 2000 -p "$pid" -o "$OUT/$w.perf.data" \
      -- sleep "${PROFILE_PERF_SECONDS:-8}"
    report() { "${perf[@]}" report -i "$OUT/$w.perf.data" "$@" 2>/dev/null | grep '%'; }
    { echo "== main thread, by symbol (% of all samples)"
      report --tid "$pid" --no-children --sort dso,symbol | head -40
      echo "== main thread: gpumem, inclusive of what it calls"
      report --tid "$pid" --children --sort symbol -g none | grep -E 'gpumem|Pluggable' | head -30
      echo "== autograd thread: gpumem, inclusive"
      report --comm pt_autograd_0 --children --sort symbol -g none \
        | grep -E 'gpumem|Pluggable' | head -30; } | cut -c1-160 >"$OUT/$w.perf.txt"
    rm -f "$OUT/$w.perf.data" "$OUT/$w-python.gpumem"  # 1500 steps' trace: not needed
  fi
  wait "$pid"
  echo "== $w: $(grep -h 'recording cost' "$OUT/$w.err")"
  [ ${#perf[@]} -gt 0 ] && continue
  $py -c 'import json,sys; r=json.load(open(sys.argv[1])); print("median step ms", round(r["median_step_seconds"]*1e3, 2), "steps", r["steps"])' "$OUT/$w-capture.json"
done
ls -la "$OUT"
