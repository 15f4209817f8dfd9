"""Does a workload complete at a fixed memory cap, run after run? min_cap.py runs each cap
once, which cannot tell an allocator that always fits from one that fits only on some
runs (PyTorch with expandable_segments failed at a cap in one session and completed at
it in another). This runs every (allocator, cap) pair several times, a few processes at
once (each is capped, so they do not crowd each other on an 80 GB GPU), in an order that
interleaves the pairs, and prints one JSON line per run and then one per pair:
{"workload", "allocator", "cap_mib", "runs", "completed"}.

usage: cap_repeat.py WORKLOAD --caps 3062,3064,3066 [--allocators gpumem,expandable]
                     [--at ALLOCATOR=CAP,CAP ...] [--runs 5] [--parallel 4]
                     [--capture SCRIPT]   (caps in MiB)
  --caps x --allocators: every allocator at every cap; --at adds pairs of its own
  (e.g. --at gpumem=3054,3056 --at expandable=3062).
"""
import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("workload", choices=["gpt2", "resnet50", "varlen_bert", "leaky_mlp"])
p.add_argument("--caps", default="", help="comma-separated caps in MiB")
p.add_argument("--allocators", default="gpumem,expandable")
p.add_argument("--at", action="append", default=[], metavar="ALLOCATOR=CAPS",
               help="one allocator at its own comma-separated caps in MiB (repeatable)")
p.add_argument("--runs", type=int, default=5, help="runs per allocator and cap")
p.add_argument("--parallel", type=int, default=4, help="processes at once")
p.add_argument("--capture", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "capture.py"),
               help="the training script, run as SCRIPT WORKLOAD --allocator A --cap BYTES; "
                    "its last JSON line's `completed` counts (default: capture.py beside this)")
args = p.parse_args()


def mib_list(text, what):
    try:
        return [int(c) for c in text.split(",") if c]
    except ValueError:
        sys.exit(f"cap_repeat.py: {what} wants MiB as integers, got {text!r}")


pairs = [(a, c) for c in mib_list(args.caps, "--caps") for a in args.allocators.split(",")]
for spec in args.at:
    allocator, sep, caps = spec.partition("=")
    if not sep or not allocator:
        sys.exit(f"cap_repeat.py: --at wants ALLOCATOR=CAP,CAP, got {spec!r}")
    pairs += [(allocator, c) for c in mib_list(caps, "--at")]
if not pairs:
    sys.exit("cap_repeat.py: no caps given (--caps or --at)")
if args.runs < 1 or args.parallel < 1:
    sys.exit("cap_repeat.py: --runs and --parallel must be at least 1")


def run(job):
    allocator, cap_mib, k = job
    out = subprocess.run([sys.executable, args.capture, args.workload,
                          "--allocator", allocator, "--cap", str(cap_mib << 20)],
                         capture_output=True, text=True,
                         env={**os.environ, "GPUMEM_LOG_OOM": "0"})
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    r = json.loads(lines[-1]) if lines else {}
    return {"workload": args.workload, "allocator": allocator, "cap_mib": cap_mib, "run": k,
            "completed": bool(r.get("completed")), "steps": r.get("steps"),
            "error": r.get("error") if lines else (out.stderr.strip().splitlines() or ["no output"])[-1][:300]}


# Run k of every pair before run k+1 of any: drift on the machine spreads over all pairs.
jobs = [(a, c, k) for k in range(args.runs) for a, c in pairs]
tally = collections.defaultdict(lambda: [0, 0])
with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
    for r in pool.map(run, jobs):
        print(json.dumps(r), flush=True)
        t = tally[(r["allocator"], r["cap_mib"])]
        t[0] += 1
        t[1] += r["completed"]
for (allocator, cap_mib), (runs, completed) in sorted(tally.items()):
    print(json.dumps({"workload": args.workload, "allocator": allocator, "cap_mib": cap_mib,
                      "runs": runs, "completed": completed}), flush=True)
