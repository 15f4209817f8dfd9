#!/usr/bin/env bash
# GPU proof for the CUPTI tracer: builds cuda_memory_calls, runs it under
# libgpumem_cupti.so and checks that every call it made is in the trace with its stack.
# Usage (repository root, on the GPU machine): tests/gpu/profiler/run_cupti_check.sh [BUILD]
# BUILD is a configured build tree with gpumem_cupti and gpumem built (default: build).
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
build="${1:-$root/build}"
cmake --build "$build" --target gpumem_cupti gpumem -j"$(nproc)" >/dev/null
work="$(mktemp -d)"
cuda="${CUDA_HOME:-/usr/local/cuda}"
g++ -std=c++17 -O1 -g -rdynamic -I"$cuda/include" \
  "$root/tests/gpu/profiler/cuda_memory_calls.cc" -o "$work/cuda_memory_calls" \
  -L"$cuda/lib64" -lcudart -lcublas -Wl,-rpath,"$cuda/lib64"
CUDA_INJECTION64_PATH="$build/lib/libgpumem_cupti.so" \
GPUMEM_CUPTI_TRACE="$work/calls.gpumem" GPUMEM_STACKS=native \
  "$work/cuda_memory_calls" > "$work/expected.txt" 2> "$work/stderr.txt"
cat "$work/stderr.txt"
"$build/bin/gpumem" dump --stacks "$work/calls.gpumem" > "$work/dump.txt"
python3 "$root/tests/gpu/profiler/check_cupti_trace.py" "$work/expected.txt" "$work/dump.txt"
echo "trace and dump kept in $work"
