"""Step time of gpumem against native PyTorch from interleaved separate runs (the allocator
cannot be switched inside one process). One run's steps share its process-level luck
(clocks, placement, neighbours), so the unit is the run: each run gives its median step
time after warm-up. The machine drifts over minutes (the lent H100s' native runs slowed
17% over one half-hour series), so runs are compared in the rounds they ran in: the i-th
gpumem run of a workload against its i-th native run, and the verdict is the geometric
mean of those paired ratios with a 95% bootstrap interval over rounds (seeded, so
repeatable). Unequal run counts fall back to medians over unpaired runs.

  within X%   the whole interval is <= 1 + X/100
  slower      the whole interval is above 1 + X/100
  undecided   the interval straddles it: more runs, or a quieter machine, are needed

usage: step_time_ab.py [--within PERCENT] [--baseline native] [--warmup STEP] results.jsonl
       (capture.py's JSON lines, several runs per workload and allocator, e.g. from
        `STEPTIME_ROUNDS=6 tests/gpu/run.sh steptime`)
"""
import argparse
import json
import math
import random
import statistics
import sys


def run_medians(lines, baseline, warmup=None):
    """{workload: {allocator: [median step seconds of each completed run]}}: the run's own
    median, or with `warmup` the median of its step_seconds from that step on."""
    out = {}
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("cap") or not r.get("completed") or not r.get("median_step_seconds"):
            continue
        median = r["median_step_seconds"]
        if warmup is not None:
            steps = r.get("step_seconds", [])[warmup:]
            if not steps:
                continue
            median = statistics.median(steps)
        out.setdefault(r["workload"], {}).setdefault(r["allocator"], []).append(median)
    return {w: runs for w, runs in out.items() if baseline in runs}


def ratio_interval(ours, theirs, resamples=2000, seed=1):
    """Median-of-runs ratio and its 95% bootstrap interval (runs resampled)."""
    rng = random.Random(seed)
    point = statistics.median(ours) / statistics.median(theirs)
    ratios = sorted(
        statistics.median(rng.choices(ours, k=len(ours))) /
        statistics.median(rng.choices(theirs, k=len(theirs)))
        for _ in range(resamples))
    return point, ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def paired_interval(ratios, resamples=2000, seed=1):
    """Geometric mean of paired ratios (each measured against its own neighbour, so slow
    drift cancels) and its 95% bootstrap interval over the pairs."""
    rng = random.Random(seed)
    logs = [math.log(r) for r in ratios]
    point = math.exp(statistics.fmean(logs))
    means = sorted(math.exp(statistics.fmean(rng.choices(logs, k=len(logs))))
                   for _ in range(resamples))
    return point, means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def verdict(low, high, within):
    limit = 1 + within / 100
    if high <= limit:
        return f"within {within:g}%"
    if low > limit:
        return "slower"
    return "undecided"


def goal_word(low, high, within):
    """The verdict as a goal's outcome: MET, NOT MET or UNDECIDED."""
    v = verdict(low, high, within)
    return "MET" if v.startswith("within") else "NOT MET" if v == "slower" else "UNDECIDED"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--within", type=float, default=1.0, help="allowed slowdown, percent")
    p.add_argument("--baseline", default="native")
    p.add_argument("--warmup", type=int, default=None,
                   help="judge steps from this one on (default: each run's own median, "
                   "after capture.py's --warmup)")
    args = p.parse_args(argv)
    try:
        with open(args.results) as f:
            table = run_medians(f, args.baseline, args.warmup)
    except (OSError, ValueError, KeyError) as e:
        print(f"step_time_ab.py: {args.results}: {e}", file=sys.stderr)
        return 2
    if not table:
        print(f"step_time_ab.py: no completed {args.baseline} runs in {args.results}",
              file=sys.stderr)
        return 2
    print("| workload | allocator | runs | median step ms | vs "
          f"{args.baseline} | 95% interval | verdict |")
    print("|---|---|---|---|---|---|---|")
    for w, runs in sorted(table.items()):
        base = runs[args.baseline]
        for a, times in sorted(runs.items()):
            ms = statistics.median(times) * 1e3
            if a == args.baseline:
                print(f"| {w} | {a} | {len(times)} | {ms:.2f} | 1 | - | - |")
                continue
            if len(times) == len(base) and len(times) >= 2:
                point, low, high = paired_interval([t / b for t, b in zip(times, base)])
                how = "paired by round"
            else:
                point, low, high = ratio_interval(times, base)
                how = "unpaired"
            print(f"| {w} | {a} | {len(times)} | {ms:.2f} | {point:.4f} | "
                  f"{low:.4f}-{high:.4f} ({how}) | {verdict(low, high, args.within)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
