"""Recording overhead from one process (capture.py --toggle N): steps alternate in blocks
of N between recording and not. Neighbouring steps share the machine's state, so the unit
is the block: each block gives its median step (its first step, which pays for the switch,
left out), and each recording block is compared with the mean of the blocks either side of
it, which cancels the drift of step time over the run (10-15% over a minute on the lent
H100s). The ratio is the geometric mean of those paired ratios, with a 95% bootstrap
interval over blocks (step_time_ab.paired_interval).

Goals (issue 5): gpumem + Python stacks within 3% (MET when the whole interval is <= 1.03,
NOT MET when it is all above, else UNDECIDED: more steps are needed), and each gpumem ratio
below PyTorch's recorder at the same stack depth.

Several result files (runs of the same code, e.g. two long runs on different machines) are
pooled: the paired ratios of each workload and configuration are taken within each run and
then bootstrapped together.

usage: overhead_ab.py RESULTS.jsonl [MORE.jsonl ...] [--warmup STEPS] [--toggle N]
                      [--within PERCENT]
"""
import argparse
import json
import statistics
import sys

from step_time_ab import goal_word, paired_interval


def blocks_of(step_seconds, recording, warmup, toggle):
    """{block number: (recording, median step)}"""
    blocks = {}
    for i, (t, rec) in enumerate(zip(step_seconds, recording)):
        if i < warmup or i % toggle == 0:  # warm-up, and the first step after each switch
            continue
        blocks.setdefault(i // toggle, (rec, []))[1].append(t)
    return {b: (rec, statistics.median(ts)) for b, (rec, ts) in blocks.items()}


def block_medians(step_seconds, recording, warmup, toggle):
    """(medians of recording blocks, medians of the other blocks)"""
    blocks = blocks_of(step_seconds, recording, warmup, toggle).values()
    return [m for rec, m in blocks if rec], [m for rec, m in blocks if not rec]


def paired_ratios(step_seconds, recording, warmup, toggle):
    """Each recording block's median over the mean of its non-recording neighbours'."""
    blocks = blocks_of(step_seconds, recording, warmup, toggle)
    ratios = []
    for b, (rec, m) in sorted(blocks.items()):
        near = [blocks[n][1] for n in (b - 1, b + 1) if n in blocks and not blocks[n][0]]
        if rec and near:
            ratios.append(m / statistics.fmean(near))
    return ratios


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--toggle", type=int, default=5)
    p.add_argument("--within", type=float, default=3.0)
    args = p.parse_args(argv)
    rows = []
    for path in args.results:
        try:
            with open(path) as f:
                rows += [json.loads(line) for line in f if line.startswith("{")]
        except (OSError, ValueError) as e:
            print(f"overhead_ab.py: {path}: {e}", file=sys.stderr)
            return 2
    pooled = {}  # (workload, label) -> [runs, on medians, off medians, paired ratios]
    for r in rows:
        label = r.get("allocator", "?")  # capture.py writes --label there
        steps, rec = r.get("step_seconds", []), r.get("recording", [])
        pairs = paired_ratios(steps, rec, args.warmup, args.toggle)
        if not r.get("completed") or len(pairs) < 2:
            print(f"{r.get('workload', '?'):<9} {label:<14} failed or too few blocks")
            continue
        on, off = block_medians(steps, rec, args.warmup, args.toggle)
        entry = pooled.setdefault((r["workload"], label), [0, [], [], []])
        entry[0] += 1
        entry[1] += on
        entry[2] += off
        entry[3] += pairs
    ratio = {}
    for (workload, label), (runs, on, off, pairs) in pooled.items():
        point, low, high = paired_interval(pairs)
        ratio[(workload, label)] = (point, low, high)
        print(f"{workload:<9} {label:<14} recording {statistics.median(on) * 1e3:8.2f} ms "
              f"({len(on)} blocks)  not {statistics.median(off) * 1e3:8.2f} ms ({len(off)} "
              f"blocks)  ratio {point:.3f} [{low:.3f}, {high:.3f}]"
              + (f"  ({runs} runs pooled)" if runs > 1 else ""))
    for w in sorted({k[0] for k in ratio}):
        g = ratio.get((w, "gpumem-python"))
        if g:
            word = goal_word(g[1], g[2], args.within)
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
