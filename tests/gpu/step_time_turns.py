"""Step time of gpumem against native PyTorch, the two taking turns on one GPU.

The allocator cannot be switched inside one process, and separate runs differ by 10-30%
on the lent H100s (clocks, placement, neighbours: a 1% goal would need dozens of rounds).
So both processes live at once: native trains a block of N steps while gpumem waits on a
pipe, then gpumem trains N steps while native waits, and so on (capture.py --turns). Both
are warm and meet the same machine minute by minute. As in overhead_ab.py, the unit is
the block: its median step without its first (which follows the other process's block),
and each gpumem block is compared with the mean of the native blocks either side of it, so
drift cancels; the verdict is the geometric mean of those ratios with a 95% bootstrap
interval (step_time_ab.paired_interval, goal_word).

usage: step_time_turns.py run WORKLOAD... [--steps 1200] [--turn-steps 5] > turns.jsonl
       step_time_turns.py judge turns.jsonl [--warmup 25] [--within 1]
  run: one native/gpumem pair per workload through capture.py (stderr of both to
       --log); prints both JSON lines. judge: the verdict per workload.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from overhead_ab import block_medians, paired_ratios
from step_time_ab import goal_word, paired_interval

ALLOCATORS = ("native", "gpumem")  # native takes the first turn
CAPTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capture.py")


def run_pair(workload, steps, turn_steps, log, script=CAPTURE):
    """Both allocators' capture.py runs taking turns; their JSON lines (None: no result)."""
    to_native, to_gpumem = os.pipe(), os.pipe()  # (read, write) each
    ends = {"native": (to_native[0], to_gpumem[1]), "gpumem": (to_gpumem[0], to_native[1])}
    procs, outs = {}, {}
    for a in ALLOCATORS:
        r, w = ends[a]
        outs[a] = tempfile.TemporaryFile("w+")
        procs[a] = subprocess.Popen(
            [sys.executable, script, workload, "--allocator", a,
             "--steps", str(steps), "--turns", f"{r},{w},{turn_steps}"],
            pass_fds=(r, w), stdout=outs[a], stderr=log)
    os.write(to_native[1], b"t")
    for fd in (*to_native, *to_gpumem):  # only the children hold them now: a child's exit
        os.close(fd)                     # is the end of its partner's pipe
    rows = []
    for a in ALLOCATORS:
        procs[a].wait()
        outs[a].seek(0)
        lines = [l for l in outs[a].read().splitlines() if l.startswith("{")]
        rows.append(lines[-1] if lines else None)
        if not lines:
            print(f"step_time_turns: {workload} {a} exited {procs[a].returncode} with no "
                  "result (see the log)", file=sys.stderr)
    return rows


def merged_blocks(native, gpumem):
    """The two runs' step times in the order they ran (native block k, then gpumem block
    k), with True for gpumem's steps; only blocks both ran while taking turns."""
    n = native["turn_steps"]
    length = min(len(native["step_seconds"]), len(gpumem["step_seconds"]),
                 *(r["alone_from_step"] for r in (native, gpumem)
                   if r.get("alone_from_step") is not None))
    steps, is_gpumem = [], []
    for start in range(0, length - length % n, n):
        for run, flag in ((native, False), (gpumem, True)):
            steps += run["step_seconds"][start:start + n]
            is_gpumem += [flag] * n
    return steps, is_gpumem


def judge(rows, warmup, within):
    """Lines of the verdict, one per workload: (text, verdict word)."""
    pairs = {}
    for r in rows:
        if "turn_steps" in r:
            pairs.setdefault(r["workload"], {})[r["allocator"]] = r
    out = []
    for w, runs in sorted(pairs.items()):
        if not all(a in runs and runs[a].get("completed") for a in ALLOCATORS):
            out.append((f"{w}: a run failed or is missing", "FAILED"))
            continue
        n = runs["native"]["turn_steps"]
        steps, flags = merged_blocks(runs["native"], runs["gpumem"])
        ratios = paired_ratios(steps, flags, 2 * warmup, n)
        if len(ratios) < 2:
            out.append((f"{w}: too few blocks after step {warmup}", "FAILED"))
            continue
        ours, theirs = block_medians(steps, flags, 2 * warmup, n)
        point, low, high = paired_interval(ratios)
        word = goal_word(low, high, within)
        out.append((f"{w}: gpumem {statistics.median(ours) * 1e3:.2f} ms, native "
                    f"{statistics.median(theirs) * 1e3:.2f} ms (medians of {len(ours)} and "
                    f"{len(theirs)} blocks of {n} steps, taking turns); gpumem/native "
                    f"{point:.4f} [{low:.4f}, {high:.4f}]; goal within {within:g}% -> {word}",
                    word))
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the pairs, print their JSON lines")
    r.add_argument("workloads", nargs="+")
    r.add_argument("--steps", type=int, default=1200)
    r.add_argument("--turn-steps", type=int, default=5)
    r.add_argument("--log", default=os.devnull, help="where both runs' stderr goes")
    j = sub.add_parser("judge", help="the verdict from run's output")
    j.add_argument("results")
    j.add_argument("--warmup", type=int, default=25,
                   help="each process's steps left out (a multiple of the turn's steps)")
    j.add_argument("--within", type=float, default=1.0, help="allowed slowdown, percent")
    args = p.parse_args(argv)
    if args.command == "run":
        with open(args.log, "a") as log:
            for w in args.workloads:
                start = time.monotonic()
                print(f"step_time_turns: {w}: native and gpumem taking turns, {args.steps} "
                      "steps each ...", file=sys.stderr, flush=True)
                for line in run_pair(w, args.steps, args.turn_steps, log):
                    if line:
                        print(line, flush=True)
                print(f"step_time_turns: {w}: done in {time.monotonic() - start:.0f} s",
                      file=sys.stderr, flush=True)
        return 0
    try:
        with open(args.results) as f:
            rows = [json.loads(l) for l in f if l.startswith("{")]
    except (OSError, ValueError) as e:
        print(f"step_time_turns.py: {args.results}: {e}", file=sys.stderr)
        return 2
    lines = judge(rows, args.warmup, args.within)
    if not lines:
        print(f"step_time_turns.py: no turn-taking runs in {args.results}", file=sys.stderr)
        return 2
    for text, _ in lines:
        print(text)
    return 0 if all(word != "FAILED" for _, word in lines) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
