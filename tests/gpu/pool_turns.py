"""Step time of one gpumem setting over native, pooled over several runs of
multi_gpu_matrix.py with turns (--jsonl files): every block of every run compared with
native's block of the same steps, as the matrix judges one run (turn_block_ratios), and
one interval over all of them, for each block's time and for its median step (the
typical step, without the long ones that either job has at random, see
multi_gpu_matrix.steadiness_line). A run gives ~40 blocks and an interval of about +-2.5%;
pooling runs of the same build narrows it.

usage: pool_turns.py [--layout fsdp2] [--within 1] FILE:MODE [FILE:MODE ...]
  MODE: gpumem, or a variant's name (--variant NAME:...).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multi_gpu_matrix import long_steps, turn_block_ratios  # noqa: E402
from step_time_ab import goal_word, paired_interval  # noqa: E402


def partner_pairs(rows, mode, layout):
    """(native row, `mode` row) of rank 0 for each round of `layout`. A native row names
    the job it took turns with ('against'); older files have no name, and their order
    says it: gpumem's native job comes before it, a variant's after it."""
    rows = [r for r in rows if r.get("layout") == layout and r.get("rank") == 0]
    pairs = []
    for i, r in enumerate(rows):
        if r["mode"] != mode:
            continue
        natives = [n for n in rows if n["mode"] == "native" and n.get("round") == r.get("round")]
        named = [n for n in natives if n.get("against") == mode]
        if named:
            pairs.append((named[0], r))
            continue
        around = rows[:i][::-1] if mode == "gpumem" else rows[i + 1:]
        native = next((n for n in around if n["mode"] == "native"), None)
        if native is not None:
            pairs.append((native, r))
    return pairs


STATISTICS = (("block time", sum), ("median step", statistics.median))


def pooled(files, layout, of=sum):
    """Per file: (file, mode, block ratios of `of` each block's step times)."""
    per_file = []
    for path, mode in files:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        ratios = []
        for native, gpumem in partner_pairs(rows, mode, layout):
            ratios += turn_block_ratios(native, gpumem, of)
        per_file.append((path, mode, ratios))
    return per_file


def long_step_counts(files, layout):
    """(native's long steps, the mode's, steps of each) over every pair of every file."""
    native_long = mode_long = steps = 0
    for path, mode in files:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        for native, gpumem in partner_pairs(rows, mode, layout):
            native_long += sum(long_steps(native["step_times"]))
            mode_long += sum(long_steps(gpumem["step_times"]))
            steps += len(gpumem["step_times"])
    return native_long, mode_long, steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="FILE:MODE")
    ap.add_argument("--layout", default="fsdp2")
    ap.add_argument("--within", type=float, default=1.0)
    args = ap.parse_args()
    files = []
    for spec in args.runs:
        path, _, mode = spec.rpartition(":")
        if not path or not mode:
            ap.error(f"{spec!r} is not FILE:MODE")
        files.append((path, mode))
    for label, of in STATISTICS:
        every = []
        for path, mode, ratios in pooled(files, args.layout, of):
            if len(ratios) < 2:
                print(f"{path}: {mode}: no blocks of turns for {args.layout}", file=sys.stderr)
                return 2
            point, low, high = paired_interval(ratios)
            print(f"{label}: {path} ({mode}): {point:.3f} [{low:.3f}, {high:.3f}] over "
                  f"{len(ratios)} blocks")
            every += ratios
        point, low, high = paired_interval(every)
        print(f"{label}, pooled: {point:.3f} [{low:.3f}, {high:.3f}] over {len(every)} "
              f"blocks; within {args.within:g}%: {goal_word(low, high, args.within)}")
    native_long, mode_long, steps = long_step_counts(files, args.layout)
    print(f"long steps: native {native_long}, the other {mode_long}, of {steps} each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
