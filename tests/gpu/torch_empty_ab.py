"""torch.empty + del under gpumem against PyTorch's own allocator, judged over many
processes taking turns (native, gpumem, gpumem, native, ...: drift hits both sides), with a
bootstrap interval of the median per-round ratio native / gpumem for each size (>= 1.0:
gpumem is no slower).

usage: torch_empty_ab.py [--rounds N] [--iterations N] [--jsonl FILE]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def one(allocator, iterations):
    p = subprocess.run([sys.executable, os.path.join(HERE, "torch_empty_bench.py"), allocator,
                        str(iterations)], capture_output=True, text=True, check=True)
    return {r["size"]: r["us_per_iter"] for r in map(json.loads, p.stdout.splitlines())}


def interval(ratios, draws=2000):
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("--jsonl", default="")
    args = ap.parse_args()
    ratios = {}
    out = open(args.jsonl, "w") if args.jsonl else None
    for r in range(args.rounds):
        order = ["native", "gpumem"] if r % 2 == 0 else ["gpumem", "native"]
        got = {a: one(a, args.iterations) for a in order}
        for size, native_us in got["native"].items():
            ratios.setdefault(size, []).append(native_us / got["gpumem"][size])
        if out:
            out.write(json.dumps({"round": r, **{a: got[a] for a in order}}) + "\n")
            out.flush()
        print(f"round {r}: " + ", ".join(f"{s}: {rs[-1]:.3f}" for s, rs in sorted(ratios.items())),
              file=sys.stderr, flush=True)
    print("| size (bytes) | native / gpumem, median of rounds | 95% interval | rounds |")
    print("|---|---|---|---|")
    for size, rs in sorted(ratios.items()):
        lo, hi = interval(rs)
        print(f"| {size} | {statistics.median(rs):.3f} | [{lo:.3f}, {hi:.3f}] | {len(rs)} |")


if __name__ == "__main__":
    main()
