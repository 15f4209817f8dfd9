#!/usr/bin/env bash
# Recording overhead measured inside one process: capture.py --toggle N alternates every N
# steps between recording and not (gpumem: gpumem.pause_trace; PyTorch's recorder:
# _record_memory_history on and off), so the machine's drift between processes (10-30 %
# between two native runs on the lent H100s) cancels out. For each configuration it prints
# median step time with recording / without, from the same run: gpumem's trace with
# Python stacks and with all stacks, and PyTorch's recorder at the same two depths.
# Goals (issue 5): gpumem + Python stacks <= 1.03; each gpumem ratio below PyTorch's at
# the same depth.
#
# usage: tests/gpu/overhead_inprocess.sh   (after tests/gpu/run.sh built build-gpu-device)
#   env: OUT, GPUMEM_PREBUILT as in run.sh; INPROC_WORKLOADS (default "resnet50 gpt2"),
#        INPROC_STEPS (default 60), INPROC_TOGGLE (default 5), INPROC_WARMUP (default 10)
set -uo pipefail
source "$(dirname "$0")/env.sh"
[ -f "$build/lib/libgpumem.so" ] || { echo "overhead_inprocess: build first (tests/gpu/run.sh)"; exit 2; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
steps=${INPROC_STEPS:-60} toggle=${INPROC_TOGGLE:-5}
results=$OUT/overhead-inprocess.jsonl
: >"$results"
for w in ${INPROC_WORKLOADS:-resnet50 gpt2}; do
  common=("$repo/tests/gpu/capture.py" "$w" --steps "$steps" --toggle "$toggle")
  GPUMEM_TRACE=$scratch/$w-py.gpumem GPUMEM_STACKS=python \
    $py "${common[@]}" --allocator gpumem --label gpumem-python >>"$results" 2>>"$OUT/overhead-inprocess.err"
  GPUMEM_TRACE=$scratch/$w-all.gpumem GPUMEM_STACKS=all \
    $py "${common[@]}" --allocator gpumem --label gpumem-all >>"$results" 2>>"$OUT/overhead-inprocess.err"
  $py "${common[@]}" --allocator native --torch-history python --label torch-python >>"$results" 2>>"$OUT/overhead-inprocess.err"
  $py "${common[@]}" --allocator native --torch-history all --label torch-all >>"$results" 2>>"$OUT/overhead-inprocess.err"
done
$py - "$results" "${INPROC_WARMUP:-10}" "$toggle" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
warmup, toggle = int(sys.argv[2]), int(sys.argv[3])
def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None
ratio = {}
for r in rows:
    on, off = [], []
    for i, (t, rec) in enumerate(zip(r["step_seconds"], r.get("recording", []))):
        if i < warmup or i % toggle == 0:  # warm-up, and the first step after each switch
            continue
        (on if rec else off).append(t)
    m_on, m_off = median(on), median(off)
    label = r["allocator"]  # capture.py writes --label there
    if not (m_on and m_off and r["completed"]):
        print(f"{r['workload']:<9} {label:<14} failed or too few steps")
        continue
    ratio[(r["workload"], label)] = m_on / m_off
    print(f"{r['workload']:<9} {label:<14} recording {m_on * 1e3:8.2f} ms ({len(on)} steps)  "
          f"not {m_off * 1e3:8.2f} ms ({len(off)} steps)  ratio {m_on / m_off:.3f}")
for w in sorted({k[0] for k in ratio}):
    g = ratio.get((w, "gpumem-python"))
    if g:
        print(f"{w}: goal gpumem + Python stacks within 3%: {100 * (g - 1):+.2f}% -> "
              f"{'MET' if g <= 1.03 else 'NOT MET'}")
    for depth in ("python", "all"):
        a, b = ratio.get((w, f"gpumem-{depth}")), ratio.get((w, f"torch-{depth}"))
        if a and b:
            print(f"{w}: goal gpumem below PyTorch's recorder, {depth} stacks: {a:.3f} vs {b:.3f} "
                  f"-> {'MET' if a < b else 'NOT MET'}")
PYEOF
