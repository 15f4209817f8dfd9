#!/usr/bin/env bash
# The GPU proofs of issue 5 (profiler), each printing PASS/FAIL lines with figures:
#   a) kill -9 in the middle of real training (leaky_mlp, resnet50): the trace reads back
#      at least every event the process had counted (kill_during_training.py);
#   b) DataLoader workers touching CUDA under fork: stderr and the trace name the problem
#      and the fix (dataloader_fork_check.py);
#   c) two ranks with torchrun + NCCL: one trace per rank and the merged report
#      (ddp_check.sh; needs 2 GPUs: device kind nvidia-h200-x2, else SKIP);
#   d) a plain CUDA C++ program under the CUPTI tracer (run_cupti_check.sh).
# usage: run_profiler_proofs.sh BUILD OUT   (BUILD: a configured build tree; tests/gpu/run.sh
#        passes its own). Exit 1 if any proof failed.
set -uo pipefail
build="$1"; out="$2"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
py=$(command -v python3)
cmake --build "$build" -j"$(nproc)" --target gpumem gpumem_shared gpumem_cupti \
  >>"$out/build.log" 2>&1 || echo "INFO build of gpumem_cupti failed or absent (see $out/build.log)"
gpumem="$build/bin/gpumem"
cupti="$build/lib/libgpumem_cupti.so"
fail=0

echo "-- a) kill -9 during training"
# leaky_mlp steps take about a millisecond and leak ~10 MiB each: kill by step, not time.
"$py" "$here/kill_during_training.py" --gpumem "$gpumem" --out "$out" --workload leaky_mlp \
  --steps 200000 --kill-step 400 --jitter 0.05 --seed 1 || fail=1
# The same with a 5 s flush interval: compression runs only when a ring is half full, so
# the kill finds up to a half ring per thread in the raw journal.
GPUMEM_TRACE_FLUSH_MS=5000 "$py" "$here/kill_during_training.py" --gpumem "$gpumem" \
  --out "$out/slow-flush" --workload leaky_mlp --steps 200000 --kill-step 300 --jitter 0.05 \
  --seed 3 || fail=1
"$py" "$here/kill_during_training.py" --gpumem "$gpumem" --out "$out" --workload resnet50 \
  --steps 5000 --after 4.0 --jitter 2.0 --seed 2 || fail=1

echo "-- b) DataLoader workers touching CUDA under fork"
"$py" "$here/dataloader_fork_check.py" --gpumem "$gpumem" --cupti "$cupti" --out "$out" || fail=1

echo "-- c) two ranks with torchrun"
"$here/ddp_check.sh" "$gpumem" "$out" || fail=1

echo "-- d) plain CUDA C++ program under the CUPTI tracer"
if "$here/run_cupti_check.sh" "$build" > "$out/cupti_check.log" 2>&1; then
  echo "PASS cupti check: $(grep -E 'expectations|trace ok' "$out/cupti_check.log" | tr '\n' ' ')"
else
  echo "FAIL cupti check: last lines of $out/cupti_check.log:"; tail -n 15 "$out/cupti_check.log"
  fail=1
fi
[ $fail -eq 0 ] && echo "profiler proofs: all passed" || echo "profiler proofs: some FAILED"
exit $fail
