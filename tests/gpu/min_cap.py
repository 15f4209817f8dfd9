"""The smallest memory cap at which a workload still completes under gpumem, and whether
PyTorch's native allocator (plain and expandable_segments) completes under that cap.
gpumem's cap is found by bisection between the workload's peak allocated bytes (nothing
can finish below it) and gpumem's own uncapped peak reserved; each trial is a full
capture.py run. A peer that completes at gpumem's cap is searched downwards too.

usage: min_cap.py results.jsonl WORKLOAD [--search-steps 3]   (one JSON line per allocator)
"""
import argparse
import json
import os
import subprocess
import sys

p = argparse.ArgumentParser()
p.add_argument("results")
p.add_argument("workload")
p.add_argument("--search-steps", type=int, default=3)
args = p.parse_args()

uncapped = {}
for line in open(args.results):
    if line.startswith("{"):
        r = json.loads(line)
        if r["workload"] == args.workload and not r["cap"] and r["completed"]:
            uncapped.setdefault(r["allocator"], r)
here = os.path.dirname(os.path.abspath(__file__))
floor = min(r["peak_allocated"] for r in uncapped.values())


def completes(allocator, cap):
    out = subprocess.run([sys.executable, os.path.join(here, "capture.py"), args.workload,
                          "--allocator", allocator, "--cap", str(cap)], capture_output=True,
                         text=True, env={**os.environ, "GPUMEM_LOG_OOM": "0"})
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    ok = bool(lines) and json.loads(lines[-1])["completed"]
    print(f"  {args.workload} {allocator} cap {cap / 2**20:.0f} MiB: "
          f"{'completes' if ok else 'fails'}", file=sys.stderr, flush=True)
    return ok


def search(allocator, lo, hi):
    for _ in range(args.search_steps):
        mid = (lo + hi) // 2
        if completes(allocator, mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


def report(allocator, **kw):
    print(json.dumps({"workload": args.workload, "allocator": allocator,
                      "peak_allocated": floor, **kw}), flush=True)


lo, hi = search("gpumem", floor, uncapped["gpumem"]["peak_reserved"])
report("gpumem", min_cap=hi, known_failing_cap=lo, min_cap_over_peak_allocated=round(hi / floor, 4))
for peer in ("native", "expandable"):
    if completes(peer, hi):
        plo, phi = search(peer, floor, hi)
        report(peer, completes_at_gpumem_cap=True, min_cap=phi, known_failing_cap=plo)
    else:
        report(peer, completes_at_gpumem_cap=False, gpumem_cap=hi,
               uncapped_peak_reserved=uncapped.get(peer, {}).get("peak_reserved"))
