"""Step time of one gpumem setting over native, pooled over several runs of
multi_gpu_matrix.py with turns (--jsonl files): every block of every run compared with
native's block of the same steps, as the matrix judges one run (turn_block_ratios), and
one interval over all of them, for each block's time and for its median step (the
typical step, without the long ones that either job has at random, see
multi_gpu_matrix.steadiness_line); and, where the runs recorded step_maps, the steps in
which the mode mapped pages apart from the others, each against native's same step. A
run gives ~40 blocks and an interval of about +-2.5%; pooling runs of the same build
narrows it. Where every rank recorded step_maps, rank 0's steps are also split by which
ranks mapped pages in them (multi_gpu_matrix.rank_map_step_parts).

usage: pool_turns.py [--layout fsdp2] [--within 1] FILE:MODE [FILE:MODE ...]
  MODE: gpumem, or a variant's name (--variant NAME:...).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multi_gpu_matrix import (RANK_MAP_PARTS, long_steps, map_parts_text,  # noqa: E402
                              pool_parts, pooled_map_step_parts, rank_map_step_parts,
                              turn_block_ratios)
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


def job_rows(rows, rank0):
    """Every rank's row of the job whose rank 0 row is `rank0` (one job of a mode a
    round; native's are told apart by partner_pairs, so they are not asked here)."""
    same = ("layout", "mode", "round")
    return [r for r in rows if all(r.get(k) == rank0.get(k) for k in same)]


def load_runs(files, layout):
    """Per file: (file, mode, its (native row, mode row) pairs of `layout`, the same
    pairs as ([native row], the mode's rows of every rank)), each file read once."""
    runs = []
    for path, mode in files:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        pairs = partner_pairs(rows, mode, layout)
        jobs = [([native], job_rows(rows, other)) for native, other in pairs]
        runs.append((path, mode, pairs, jobs))
    return runs


def pooled_rank_map_parts(runs):
    """rank_map_step_parts of every job pair of every run, each part's steps together."""
    return pool_parts(RANK_MAP_PARTS, (rank_map_step_parts(native_rows, other_rows)
                                       for *_, jobs in runs
                                       for native_rows, other_rows in jobs))


def pooled(runs, of=sum):
    """Per run of load_runs: (file, mode, block ratios of `of` each block's step times)."""
    return [(path, mode, [ratio for native, other in pairs
                          for ratio in turn_block_ratios(native, other, of)])
            for path, mode, pairs, _ in runs]


def long_step_counts(runs):
    """(native's long steps, the mode's, steps of each) over every pair of every run."""
    native_long = mode_long = steps = 0
    for _, _, pairs, _ in runs:
        for native, other in pairs:
            native_long += sum(long_steps(native["step_times"]))
            mode_long += sum(long_steps(other["step_times"]))
            steps += len(other["step_times"])
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
    runs = load_runs(files, args.layout)
    for label, of in STATISTICS:
        every = []
        for path, mode, ratios in pooled(runs, of):
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
    native_long, mode_long, steps = long_step_counts(runs)
    print(f"long steps: native {native_long}, the other {mode_long}, of {steps} each")
    maps_text = map_parts_text(
        pooled_map_step_parts(pair for _, _, pairs, _ in runs for pair in pairs), "the other")
    if maps_text:  # runs that recorded step_maps
        print(f"steps by whether the other mapped pages, pooled: {maps_text}")
    ranks_text = map_parts_text(pooled_rank_map_parts(runs), "the other")
    if ranks_text:  # every rank recorded step_maps
        print(f"rank 0's steps by which ranks the other mapped pages in, pooled: {ranks_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
