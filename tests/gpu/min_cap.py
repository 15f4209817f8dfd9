"""The smallest memory cap at which a workload still completes, per allocator, found by
bisection between the workload's peak allocated bytes (nothing can finish below it) and
the allocator's own uncapped peak reserved. Each trial is a full capture.py run.

usage: min_cap.py results.jsonl WORKLOAD [--allocators native,expandable,gpumem]
                  [--steps-of-search 5]   (prints one JSON line per allocator)
"""
import argparse
import json
import os
import subprocess
import sys

p = argparse.ArgumentParser()
p.add_argument("results")
p.add_argument("workload")
p.add_argument("--allocators", default="gpumem,expandable,native")
p.add_argument("--steps-of-search", type=int, default=5)
args = p.parse_args()

uncapped = {}
for line in open(args.results):
    if line.startswith("{"):
        r = json.loads(line)
        if r["workload"] == args.workload and not r["cap"] and r["completed"]:
            uncapped[r["allocator"]] = r
here = os.path.dirname(os.path.abspath(__file__))
floor = min(r["peak_allocated"] for r in uncapped.values())


def completes(allocator, cap):
    out = subprocess.run([sys.executable, os.path.join(here, "capture.py"), args.workload,
                          "--allocator", allocator, "--cap", str(cap)],
                         capture_output=True, text=True, env={**os.environ, "GPUMEM_LOG_OOM": "0"})
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    return bool(lines) and json.loads(lines[-1])["completed"]


for allocator in args.allocators.split(","):
    if allocator not in uncapped:
        continue
    lo, hi = floor, int(uncapped[allocator]["peak_reserved"] * 1.02)  # lo fails?, hi passes
    if not completes(allocator, hi):
        print(json.dumps({"workload": args.workload, "allocator": allocator,
                          "min_cap": None, "note": f"failed even at {hi}"}), flush=True)
        continue
    for _ in range(args.steps_of_search):
        mid = (lo + hi) // 2
        if completes(allocator, mid):
            hi = mid
        else:
            lo = mid
    print(json.dumps({"workload": args.workload, "allocator": allocator, "min_cap": hi,
                      "known_failing_cap": lo, "peak_allocated": floor,
                      "min_cap_over_peak_allocated": round(hi / floor, 4)}), flush=True)
