"""Reads capture.py's JSON lines and prints the training-proof table: losses step by step
(gpumem vs native), peak reserved / peak allocated, the driver cross-check, and median
step time as a ratio to native, and (gpumem) the maps / unmaps / synchronizes of the timed
steps (issue 4: a warm steady loop should do none).

usage: compare.py results.jsonl
"""
import json
import sys

runs = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        if not r.get("cap"):
            runs.setdefault((r["workload"], r["allocator"]), r)  # the first run of each

MiB = 1 << 20
print("| workload | allocator | steps | max abs loss diff vs native | peak allocated MiB | "
      "peak reserved MiB | reserved/allocated | driver peak used MiB | median step ms | "
      "time vs native | maps / unmaps / syncs after warm-up |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (w, a), r in sorted(runs.items()):
    native = runs.get((w, "native"))
    diff = "-"
    if native and a != "native" and r["completed"] and native["completed"]:
        n = min(len(r["losses"]), len(native["losses"]))
        d = max(abs(x - y) for x, y in zip(r["losses"][:n], native["losses"][:n]))
        same = r["losses"] == native["losses"]
        diff = "0 (bitwise equal)" if same else f"{d:.3g}"
    t = r["median_step_seconds"]
    tn = native["median_step_seconds"] if native else None
    rel = f"{t / tn:.4f}" if t and tn else "-"
    calls = r.get("device_calls_after_warmup")
    calls = " / ".join(str(c) for c in calls) if calls else "-"
    print(f"| {w} | {a} | {r['steps']}{'' if r['completed'] else ' (OOM)'} | {diff} | "
          f"{r['peak_allocated'] / MiB:.1f} | {r['peak_reserved'] / MiB:.1f} | "
          f"{r['ratio']:.4f} | {r['driver_peak_used'] / MiB:.1f} | "
          f"{(t or 0) * 1e3:.2f} | {rel} | {calls} |")
