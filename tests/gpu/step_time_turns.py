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

usage: step_time_turns.py run WORKLOAD... [--steps 1200] [--turn-steps 5]
                             [--sides BASELINE,CANDIDATE] > turns.jsonl
       step_time_turns.py judge turns.jsonl [--warmup 25] [--within 1]
  run: one baseline/candidate pair per workload through capture.py (stderr of both to
       --log); prints both JSON lines. A side is capture.py's allocator with environment
       variables after '+': the default native,gpumem; gpumem+GPUMEM_HEADROOM=0,gpumem
       prices the headroom. judge: the verdict per workload, candidate over baseline.
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
from turns import ROLES

SIDES = ("native", "gpumem")  # baseline, candidate; the baseline takes the first turn
CAPTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capture.py")


def parse_side(spec):
    """'gpumem+GPUMEM_HEADROOM=0,GPUMEM_STITCH=1' -> ('gpumem', {...})."""
    allocator, _, assignments = spec.partition("+")
    env = dict(a.split("=", 1) for a in assignments.split(",") if "=" in a)
    if not allocator or (assignments and not env):
        raise SystemExit(f"--sides: {spec!r} is not ALLOCATOR[+VAR=VALUE,...]")
    return allocator, env


def run_pair(workload, steps, turn_steps, log, script=CAPTURE, sides=SIDES):
    """Both sides' capture.py runs taking turns; their JSON lines, each marked with its
    side and role (None: no result)."""
    to_baseline, to_candidate = os.pipe(), os.pipe()  # (read, write) each
    ends = {"baseline": (to_baseline[0], to_candidate[1]),
            "candidate": (to_candidate[0], to_baseline[1])}
    procs, outs = {}, {}
    for role, spec in zip(ROLES, sides):
        allocator, env = parse_side(spec)
        r, w = ends[role]
        outs[role] = tempfile.TemporaryFile("w+")
        procs[role] = subprocess.Popen(
            [sys.executable, script, workload, "--allocator", allocator,
             "--steps", str(steps), "--turns", f"{r},{w},{turn_steps}"],
            pass_fds=(r, w), stdout=outs[role], stderr=log, env=dict(os.environ, **env))
    os.write(to_baseline[1], b"t")
    for fd in (*to_baseline, *to_candidate):  # only the children hold them now: a child's
        os.close(fd)                          # exit is the end of its partner's pipe
    rows = []
    for role, spec in zip(ROLES, sides):
        procs[role].wait()
        outs[role].seek(0)
        lines = [l for l in outs[role].read().splitlines() if l.startswith("{")]
        rows.append(json.dumps(dict(json.loads(lines[-1]), side=spec, role=role))
                    if lines else None)
        if not lines:
            print(f"step_time_turns: {workload} {spec} exited {procs[role].returncode} with "
                  "no result (see the log)", file=sys.stderr)
    return rows


def merged_blocks(baseline, candidate):
    """The two runs' step times in the order they ran (baseline block k, then candidate
    block k), with True for the candidate's steps; only blocks both ran taking turns."""
    n = baseline["turn_steps"]
    length = min(len(baseline["step_seconds"]), len(candidate["step_seconds"]),
                 *(r["alone_from_step"] for r in (baseline, candidate)
                   if r.get("alone_from_step") is not None))
    steps, is_candidate = [], []
    for start in range(0, length - length % n, n):
        for run, flag in ((baseline, False), (candidate, True)):
            steps += run["step_seconds"][start:start + n]
            is_candidate += [flag] * n
    return steps, is_candidate


def role_of(row):
    """Rows of older runs have no role: native was the baseline."""
    return row.get("role") or ("baseline" if row["allocator"] == "native" else "candidate")


def judge(rows, warmup, within):
    """Lines of the verdict, one per workload: (text, verdict word)."""
    pairs = {}
    for r in rows:
        if "turn_steps" in r:
            pairs.setdefault(r["workload"], {})[role_of(r)] = r
    out = []
    for w, runs in sorted(pairs.items()):
        if not all(a in runs and runs[a].get("completed") for a in ROLES):
            out.append((f"{w}: a run failed or is missing", "FAILED"))
            continue
        base, cand = runs["baseline"], runs["candidate"]
        names = [r.get("side", r["allocator"]) for r in (cand, base)]
        n = base["turn_steps"]
        steps, flags = merged_blocks(base, cand)
        ratios = paired_ratios(steps, flags, 2 * warmup, n)
        if len(ratios) < 2:
            out.append((f"{w}: too few blocks after step {warmup}", "FAILED"))
            continue
        ours, theirs = block_medians(steps, flags, 2 * warmup, n)
        point, low, high = paired_interval(ratios)
        word = goal_word(low, high, within)
        memory = "".join(
            f"; {name} peak reserved {r['peak_reserved'] / 2**30:.3f} GiB"
            for name, r in zip(names, (cand, base)) if "peak_reserved" in r)
        out.append((f"{w}: {names[0]} {statistics.median(ours) * 1e3:.2f} ms, {names[1]} "
                    f"{statistics.median(theirs) * 1e3:.2f} ms (medians of {len(ours)} and "
                    f"{len(theirs)} blocks of {n} steps, taking turns); {names[0]}/{names[1]} "
                    f"{point:.4f} [{low:.4f}, {high:.4f}]; goal within {within:g}% -> {word}"
                    f"{memory}", word))
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
    r.add_argument("--sides", default=",".join(SIDES),
                   help="BASELINE,CANDIDATE: ALLOCATOR[+VAR=VALUE,...] each")
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
                sides = args.sides.split(",")
                if len(sides) != 2:
                    p.error(f"--sides wants BASELINE,CANDIDATE, not {args.sides!r}")
                print(f"step_time_turns: {w}: {sides[0]} and {sides[1]} taking turns, "
                      f"{args.steps} steps each ...", file=sys.stderr, flush=True)
                for line in run_pair(w, args.steps, args.turn_steps, log, sides=sides):
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
