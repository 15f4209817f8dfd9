#!/usr/bin/env bash
# GPU proof (issue 5): two ranks with torchrun under `gpumem run` with
# GPUMEM_TRACE=run-%r.gpumem leave one trace per rank, and `gpumem report` on both gives
# the merged per-rank view. The proof needs 2 GPUs and NCCL (device kind nvidia-h200-x2).
# On one GPU it says SKIP for that and runs the same two ranks over gloo on the one GPU
# instead (each rank its own allocator and trace; NCCL's own buffers are not in it), its
# lines marked "one GPU, gloo". No GPU: SKIP. PASS/FAIL lines with figures; exit 1 on FAIL.
# usage: ddp_check.sh GPUMEM_CLI OUT_DIR
set -uo pipefail
gpumem="$1"; out="$2/ddp"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"; rm -f "$out"/run-*.gpumem
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
label=ddp
if [ "$gpus" -lt 1 ]; then
  echo "SKIP ddp: no GPU here"
  exit 0
elif [ "$gpus" -lt 2 ]; then
  echo "SKIP ddp over NCCL: 1 GPU here; two NCCL ranks need 2 (device kind nvidia-h200-x2)"
  export DDP_BACKEND=gloo
  label="ddp (one GPU, gloo)"
fi
fail=0
py=$(command -v python3)
( cd "$out" && timeout 600 "$gpumem" run --trace "$out/run-%r.gpumem" -- \
    "$py" -m torch.distributed.run --standalone --nproc_per_node=2 "$here/ddp_two_ranks.py" \
    > "$out/torchrun.out" 2> "$out/torchrun.err" )
status=$?
if [ $status -ne 0 ]; then
  echo "FAIL $label torchrun: exit $status; last lines of $out/torchrun.err:"; tail -15 "$out/torchrun.err"
  fail=1
fi
for r in 0 1; do
  t="$out/run-$r.gpumem"
  if [ ! -s "$t" ]; then echo "FAIL $label rank $r: no trace $t"; fail=1; continue; fi
  "$gpumem" dump "$t" > "$out/dump-$r.txt" 2> "$out/dump-$r.err"
  n=$(sed -n 's/.*format gpumem, \([0-9]*\) events.*/\1/p' "$out/dump-$r.txt" | head -1)
  rank=$(sed -n 's/^# rank=//p' "$out/dump-$r.txt")
  steps=$(grep -c $'\tstep\t' "$out/dump-$r.txt")
  warn=$(wc -l < "$out/dump-$r.err")
  if [ "${n:-0}" -gt 0 ] && [ "$rank" = "$r" ] && [ "$steps" -ge 1 ] && [ "$warn" -eq 0 ]; then
    echo "PASS $label rank $r: $t holds $n events, $steps steps, header rank=$rank, complete ($(stat -c %s "$t") bytes)"
  else
    echo "FAIL $label rank $r: $t: events=${n:-?} header rank=${rank:-?} steps=$steps warnings=$warn (see $out/dump-$r.err)"
    fail=1
  fi
done
extra=$(ls "$out"/run-*.gpumem 2>/dev/null | grep -v -E 'run-[01]\.gpumem$' | tr '\n' ' ')
[ -n "$extra" ] && echo "INFO $label: other traces in $out: $extra"
if [ -s "$out/run-0.gpumem" ] && [ -s "$out/run-1.gpumem" ]; then
  "$gpumem" report "$out/run-0.gpumem" "$out/run-1.gpumem" > "$out/report.txt" 2>&1
  rs=$?
  "$gpumem" report --json "$out/run-0.gpumem" "$out/run-1.gpumem" > "$out/report.json" 2>/dev/null
  merged=$("$py" - "$out/report.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
m = j.get("merged", {})
ranks = m.get("ranks", [])
print(len(ranks), m.get("imbalance"), " ".join(str(r.get("peak_allocated")) for r in ranks))
PY
)
  set -- $merged
  if [ $rs -eq 0 ] && [ "${1:-0}" = 2 ]; then
    echo "PASS $label merged report: 2 ranks, imbalance ${2:-?}, peak allocated per rank ${3:-?} ${4:-?} bytes ($out/report.txt)"
  else
    echo "FAIL $label merged report: exit $rs, merged ranks ${1:-none} (see $out/report.txt)"
    fail=1
  fi
fi
exit $fail
