#!/usr/bin/env bash
# Recording overhead on a GPU: median step time after warm-up (capture.py's figure) for
# gpt2 and resnet50 under: PyTorch's native allocator; gpumem without trace; gpumem + trace
# with Python stacks; the same as a 16M ring (GPUMEM_TRACE_MAX); with all stacks; profile-only mode (native allocator recorded by
# gpumem, Python and all stacks); PyTorch's own _record_memory_history(stacks="python")
# and stacks="all". Rounds interleave the configurations, so drift hits all of them.
# Prints a table with ratios to gpumem without trace and to native, and the goals:
# gpumem + trace (python) <= 3% over gpumem without trace, and each gpumem recording
# below PyTorch's recorder at the same stack depth.
#
# usage: tests/gpu/overhead.sh   (after tests/gpu/run.sh built build-gpu-device; or run
#        `tests/gpu/run.sh overhead`, which builds first)
#   env: OUT, GPUMEM_PREBUILT as in run.sh; OVERHEAD_WORKLOADS (default "gpt2 resnet50"),
#        OVERHEAD_STEPS (default 25), OVERHEAD_ROUNDS (default 1), OVERHEAD_CONFIGS (subset
#        of the names below)
set -uo pipefail
source "$(dirname "$0")/env.sh"
[ -f "$build/lib/libgpumem.so" ] || { echo "overhead: $build/lib/libgpumem.so missing: run tests/gpu/run.sh overhead"; exit 2; }
[ -f "$build/lib/libgpumem_torch.so" ] || echo "overhead: libgpumem_torch.so missing: profile-only rows will fail"
scratch=$(mktemp -d)  # the traces of the timed runs
trap 'rm -rf "$scratch"' EXIT
cap=$repo/tests/gpu/capture.py
steps=${OVERHEAD_STEPS:-25}
configs=${OVERHEAD_CONFIGS:-native gpumem gpumem+trace-python gpumem+ring-python gpumem+trace-all profile-python profile-all torch-python torch-all}
workloads=${OVERHEAD_WORKLOADS:-gpt2 resnet50}
results=$OUT/overhead-${workloads// /-}.jsonl  # one file per workload set: calls may be split
: >"$results"

run_config() {  # workload config
  local w=$1 c=$2 t="$scratch/$1-$2.gpumem"
  local common=("$cap" "$w" --steps "$steps" --label "$c")
  case $c in
    native) $py "${common[@]}" --allocator native ;;
    gpumem) $py "${common[@]}" --allocator gpumem ;;
    gpumem+trace-python) GPUMEM_TRACE=$t GPUMEM_STACKS=python $py "${common[@]}" --allocator gpumem ;;
    gpumem+ring-python) GPUMEM_TRACE=$t GPUMEM_TRACE_MAX=16M GPUMEM_STACKS=python $py "${common[@]}" --allocator gpumem ;;
    gpumem+trace-all) GPUMEM_TRACE=$t GPUMEM_STACKS=all $py "${common[@]}" --allocator gpumem ;;
    profile-python) GPUMEM_TRACE=$t GPUMEM_STACKS=python $py "${common[@]}" --allocator profile ;;
    profile-all) GPUMEM_TRACE=$t GPUMEM_STACKS=all $py "${common[@]}" --allocator profile ;;
    torch-python) $py "${common[@]}" --allocator native --torch-history python ;;
    torch-all) $py "${common[@]}" --allocator native --torch-history all ;;
    *) echo "unknown config $c" >&2; return 2 ;;
  esac
  local rc=$?
  [ -f "$t" ] && ls -l "$t" | awk -v c="$c" -v w="$w" '{print "  trace " w " " c ": " $5 " bytes"}' >&2
  rm -f "$t" "${t%.gpumem}".seg*.gpumem
  return $rc
}

for w in $workloads; do
  for round in $(seq "${OVERHEAD_ROUNDS:-1}"); do
    for c in $configs; do
      run_config "$w" "$c" >>"$results" 2>>"$OUT/overhead.err" \
        || echo "overhead: $w $c failed (see overhead.err)"
      tail -1 "$results" | cut -c1-70
    done
  done
done

$py - "$results" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
WARMUP = 3
def median(w, c):
    v = sorted(t for r in rows if r["workload"] == w and r["allocator"] == c and r["completed"]
               for t in r["step_seconds"][WARMUP:])
    return (v[len(v) // 2], len(v)) if v else (None, 0)
configs = []
for r in rows:
    if r["allocator"] not in configs:
        configs.append(r["allocator"])
for w in sorted({r["workload"] for r in rows}):
    print(f"\n{w}: median step time after {WARMUP} warm-up steps")
    print(f"  {'configuration':<22} {'ms':>9} {'n':>4} {'vs gpumem':>10} {'vs native':>10}")
    med = {c: median(w, c) for c in configs}
    base, nat = med.get("gpumem", (None, 0))[0], med.get("native", (None, 0))[0]
    for c in configs:
        m, n = med[c]
        if m is None:
            print(f"  {c:<22} {'failed':>9}")
            continue
        vs_g = f"{m / base:.3f}" if base else "-"
        vs_n = f"{m / nat:.3f}" if nat else "-"
        print(f"  {c:<22} {m * 1e3:9.2f} {n:4d} {vs_g:>10} {vs_n:>10}")
    def ratio(a, b):
        return med[a][0] / med[b][0] if med.get(a, (None,))[0] and med.get(b, (None,))[0] else None
    r = ratio("gpumem+trace-python", "gpumem")
    if r:
        print(f"  goal: gpumem + trace (python) within 3% of gpumem: {100 * (r - 1):+.2f}% "
              f"-> {'MET' if r <= 1.03 else 'NOT MET'}")
    for ours, theirs in (("gpumem+trace-python", "torch-python"), ("gpumem+trace-all", "torch-all"),
                         ("profile-python", "torch-python"), ("profile-all", "torch-all")):
        a, b = med.get(ours, (None,))[0], med.get(theirs, (None,))[0]
        if a and b:
            print(f"  goal: {ours} below {theirs}: {a * 1e3:.2f} vs {b * 1e3:.2f} ms "
                  f"-> {'MET' if a < b else 'NOT MET'}")
PYEOF
