#!/usr/bin/env bash
# Recording overhead measured inside one process: capture.py --toggle N alternates every N
# steps between recording and not (gpumem: gpumem.pause_trace; PyTorch's recorder:
# _record_memory_history on and off), so the machine's drift between processes (10-30 %
# between two native runs on the lent H100s) cancels out. For each configuration it prints
# median step time with recording / without, from the same run: gpumem's trace with
# Python stacks and with all stacks, and PyTorch's recorder at the same two depths, each
# with a bootstrap interval over toggle blocks (tests/gpu/overhead_ab.py).
# Goals (issue 5): gpumem + Python stacks <= 1.03; each gpumem ratio below PyTorch's at
# the same depth.
#
# usage: tests/gpu/overhead_inprocess.sh   (after tests/gpu/run.sh built build-gpu-device)
#   env: OUT, GPUMEM_PREBUILT as in run.sh; INPROC_WORKLOADS (default "resnet50 gpt2"),
#        INPROC_STEPS (default 200), INPROC_TOGGLE (default 5), INPROC_WARMUP (default 10),
#        INPROC_CONFIGS (default "gpumem-python gpumem-all torch-python torch-all": e.g.
#        gpumem-python alone, for a long run that narrows the 3% verdict's interval;
#        gpumem-none, the trace without stacks, splits records from stack captures)
set -uo pipefail
source "$(dirname "$0")/env.sh"
[ -f "$build/lib/libgpumem.so" ] || { echo "overhead_inprocess: build first (tests/gpu/run.sh)"; exit 2; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
steps=${INPROC_STEPS:-200} toggle=${INPROC_TOGGLE:-5}
results=$OUT/overhead-inprocess.jsonl
: >"$results"
configs=${INPROC_CONFIGS:-gpumem-python gpumem-all torch-python torch-all}
for w in ${INPROC_WORKLOADS:-resnet50 gpt2}; do
  common=("$repo/tests/gpu/capture.py" "$w" --steps "$steps" --toggle "$toggle")
  for c in $configs; do
    case $c in
      gpumem-python|gpumem-all|gpumem-none)
        GPUMEM_TRACE=$scratch/$w-$c.gpumem GPUMEM_STACKS=${c#gpumem-} \
          $py "${common[@]}" --allocator gpumem --label "$c" ;;
      torch-python|torch-all)
        $py "${common[@]}" --allocator native --torch-history "${c#torch-}" --label "$c" ;;
      *) echo "overhead_inprocess: unknown INPROC_CONFIGS entry $c" >&2; exit 2 ;;
    esac >>"$results" 2>>"$OUT/overhead-inprocess.err"
  done
done
$py "$repo/tests/gpu/overhead_ab.py" "$results" --warmup "${INPROC_WARMUP:-10}" \
  --toggle "$toggle" | tee "$OUT/overhead-inprocess.txt"
