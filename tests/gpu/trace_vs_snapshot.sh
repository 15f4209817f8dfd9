#!/usr/bin/env bash
# On the GPU machine: leaky_mlp traced by gpumem (GPUMEM_TRACE, Python stacks) and the same
# workload on PyTorch's native allocator recorded by PyTorch's own _record_memory_history
# (stacks="python"); `gpumem report --json` on both; then the trace's overhead (median step
# time, gpumem without trace vs with trace + Python stacks) on leaky_mlp and resnet50.
#
# usage: tests/gpu/trace_vs_snapshot.sh   (env: OUT, GPUMEM_PREBUILT as in run.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$repo/gpu-results}
mkdir -p "$OUT"
prebuilt=${GPUMEM_PREBUILT:-$repo/third_party/prebuilt}/usr
arch=$prebuilt/lib/x86_64-linux-gnu
build=$repo/build-gpu-device
py=$(command -v python3)
export LD_LIBRARY_PATH=$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GPUMEM_LIB_DIR=$build/lib PYTHONPATH=$repo/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
scratch=$(mktemp -d)  # build log, the raw snapshot and the overhead runs' traces
trap 'rm -rf "$scratch"' EXIT

torch_prefix=$($py -c 'import torch;print(torch.utils.cmake_prefix_path)')
$py -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
rm -f "$build/CMakeCache.txt"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGPUMEM_SANITIZERS=OFF \
  -DCMAKE_PREFIX_PATH="$prebuilt;$torch_prefix" -DPython3_EXECUTABLE="$py" \
  -DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu -DLIBLZMA_LIBRARY="$arch/liblzma.so" \
  -DZLIB_LIBRARY="$arch/libz.so" -DLIBLZMA_INCLUDE_DIR="$prebuilt/include" \
  -DZLIB_INCLUDE_DIR="$prebuilt/include" >"$scratch/build.log" 2>&1 \
  || { echo "configure failed"; tail -30 "$scratch/build.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target gpumem_shared gpumem >>"$scratch/build.log" 2>&1 \
  || { echo "build failed"; grep -E "error" "$scratch/build.log" | tail -15; exit 1; }

cap=$repo/tests/gpu/capture.py
echo "== leaky_mlp: gpumem + trace (python stacks), native + PyTorch snapshot"
GPUMEM_TRACE=$OUT/leaky_mlp.gpumem GPUMEM_STACKS=python \
  $py "$cap" leaky_mlp --allocator gpumem | tee -a "$OUT/runs.jsonl"
$py "$cap" leaky_mlp --allocator native --snapshot "$scratch/leaky_mlp.pickle" | tee -a "$OUT/runs.jsonl"
xz -9 -c "$scratch/leaky_mlp.pickle" >"$OUT/leaky_mlp.pickle.xz"
ls -l "$OUT"
for f in leaky_mlp.gpumem leaky_mlp.pickle.xz; do
  "$build/bin/gpumem" report --json "$OUT/$f" >"$OUT/report-$f.json" || echo "report $f failed"
  "$build/bin/gpumem" report "$OUT/$f" 2>&1 | head -30
done
"$build/bin/gpumem" dump --stacks --limit 40 "$OUT/leaky_mlp.gpumem" | head -60

echo "== overhead: median step seconds, gpumem vs gpumem + trace (python stacks)"
for w in leaky_mlp resnet50; do
  for round in 1 2; do
    $py "$cap" $w --allocator gpumem | tee -a "$OUT/overhead.jsonl" | cut -c1-60
    GPUMEM_TRACE="$scratch/o-$w.gpumem" GPUMEM_STACKS=python $py "$cap" $w --allocator gpumem \
      | sed 's/"allocator": "gpumem"/"allocator": "gpumem+trace"/' \
      | tee -a "$OUT/overhead.jsonl" | cut -c1-60
  done
done
$py - "$OUT/overhead.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for w in sorted({r["workload"] for r in rows}):
    med = {}
    for a in ("gpumem", "gpumem+trace"):
        v = sorted(t for r in rows if r["workload"] == w and r["allocator"] == a
                   for t in r["step_seconds"][3:])
        med[a] = v[len(v) // 2] if v else float("nan")
    print(f"{w}: gpumem {med['gpumem']*1e3:.2f} ms, +trace {med['gpumem+trace']*1e3:.2f} ms, "
          f"overhead {100 * (med['gpumem+trace'] / med['gpumem'] - 1):+.2f}%")
EOF
