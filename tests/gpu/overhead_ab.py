"""Recording overhead from one process (capture.py --toggle N): steps alternate in blocks
of N between recording and not. Neighbouring steps share the machine's state, so the unit
is the block: each block gives its median step (its first step, which pays for the switch,
left out); the ratio compares the median of recording blocks with the median of the
others, with a 95% bootstrap interval over blocks (step_time_ab.ratio_interval).

Goals (issue 5): gpumem + Python stacks within 3% (MET when the whole interval is <= 1.03,
NOT MET when it is all above, else UNDECIDED: more steps are needed), and each gpumem ratio
below PyTorch's recorder at the same stack depth.

usage: overhead_ab.py RESULTS.jsonl [--warmup STEPS] [--toggle N] [--within PERCENT]
"""
import argparse
import json
import statistics
import sys

from step_time_ab import ratio_interval, verdict


def block_medians(step_seconds, recording, warmup, toggle):
    """(medians of recording blocks, medians of the other blocks)"""
    blocks = {}
    for i, (t, rec) in enumerate(zip(step_seconds, recording)):
        if i < warmup or i % toggle == 0:  # warm-up, and the first step after each switch
            continue
        blocks.setdefault(i // toggle, (rec, []))[1].append(t)
    on = [statistics.median(ts) for rec, ts in blocks.values() if rec]
    off = [statistics.median(ts) for rec, ts in blocks.values() if not rec]
    return on, off


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--toggle", type=int, default=5)
    p.add_argument("--within", type=float, default=3.0)
    args = p.parse_args(argv)
    try:
        with open(args.results) as f:
            rows = [json.loads(line) for line in f if line.startswith("{")]
    except (OSError, ValueError) as e:
        print(f"overhead_ab.py: {args.results}: {e}", file=sys.stderr)
        return 2
    ratio = {}
    for r in rows:
        label = r.get("allocator", "?")  # capture.py writes --label there
        on, off = block_medians(r.get("step_seconds", []), r.get("recording", []),
                                args.warmup, args.toggle)
        if not r.get("completed") or len(on) < 2 or len(off) < 2:
            print(f"{r.get('workload', '?'):<9} {label:<14} failed or too few blocks")
            continue
        point, low, high = ratio_interval(on, off)
        ratio[(r["workload"], label)] = (point, low, high)
        print(f"{r['workload']:<9} {label:<14} recording {statistics.median(on) * 1e3:8.2f} ms "
              f"({len(on)} blocks)  not {statistics.median(off) * 1e3:8.2f} ms ({len(off)} "
              f"blocks)  ratio {point:.3f} [{low:.3f}, {high:.3f}]")
    for w in sorted({k[0] for k in ratio}):
        g = ratio.get((w, "gpumem-python"))
        if g:
            v = verdict(g[1], g[2], args.within)
            word = "MET" if v.startswith("within") else "NOT MET" if v == "slower" else "UNDECIDED"
            print(f"{w}: goal gpumem + Python stacks within {args.within:g}%: "
                  f"{100 * (g[0] - 1):+.2f}% [{100 * (g[1] - 1):+.2f}%, {100 * (g[2] - 1):+.2f}%]"
                  f" -> {word}")
        for depth in ("python", "all"):
            a, b = ratio.get((w, f"gpumem-{depth}")), ratio.get((w, f"torch-{depth}"))
            if a and b:
                print(f"{w}: goal gpumem below PyTorch's recorder, {depth} stacks: "
                      f"{a[0]:.3f} vs {b[0]:.3f} -> {'MET' if a[0] < b[0] else 'NOT MET'}")
    return 0 if ratio else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
