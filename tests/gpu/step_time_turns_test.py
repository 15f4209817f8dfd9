"""step_time_turns.py without a GPU: two stand-in training processes (the real Turns
protocol, made-up step times) take turns through run_pair, and the verdict pairs each
gpumem block with the native blocks either side of it."""
import json
import os
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import step_time_turns  # noqa: E402

# Stands in for capture.py: each step appends "allocator step" to a shared log (only one
# process runs at a time, so the log is the order the GPU would see), and its step time
# is 10 ms times the machine's drift (+40% over the log) times the allocator's cost.
FAKE = r'''
import argparse, json, os, sys
sys.path.insert(0, HERE)
from turns import Turns
p = argparse.ArgumentParser()
p.add_argument("workload"); p.add_argument("--allocator"); p.add_argument("--steps", type=int)
p.add_argument("--turns")
a = p.parse_args()
cost = {"native": 1.0, "gpumem": float(a.workload.split("-")[1])}[a.allocator]
cost *= float(os.environ.get("FAKE_COST", "1"))  # a side's environment reaches it
crash_at = int(a.workload.split("-")[2]) if a.allocator == "gpumem" else -1
turns = Turns(a.turns)
turns.wait(0)
times = []
for step in range(a.steps):
    if step == crash_at:
        sys.exit(1)
    with open(LOG, "a") as log:
        log.write(f"{a.allocator} {step}\n")
    with open(LOG) as log:
        clock = sum(1 for _ in log)
    first = step % turns.steps == 0
    times.append(0.010 * cost * (1 + 0.4 * clock / (2 * a.steps)) * (1.5 if first else 1)
                 * (1 + 0.002 * (step % 3)))
    if (step + 1) % turns.steps == 0:
        turns.pass_and_wait(step + 1)
print(json.dumps({"workload": a.workload, "allocator": a.allocator, "completed": True,
                  "step_seconds": times, "turn_steps": turns.steps,
                  "alone_from_step": turns.alone_from}))
'''


def pair(workload, folder, steps=60, sides=step_time_turns.SIDES):
    log = os.path.join(folder, f"{workload}.order")
    script = os.path.join(folder, "fake_capture.py")
    with open(script, "w") as f:
        f.write(f"HERE = {here!r}\nLOG = {log!r}\n" + FAKE)
    with open(os.devnull, "w") as quiet:
        rows = step_time_turns.run_pair(workload, steps, 5, quiet, script=script, sides=sides)
    with open(log) as f:
        order = [line.split() for line in f]
    return rows, order


def verdict(rows):
    lines = step_time_turns.judge([json.loads(r) for r in rows], warmup=10, within=1.0)
    assert len(lines) == 1, lines
    return lines[0]


def main():
    with tempfile.TemporaryDirectory() as folder:
        rows, order = pair("tie-1.002-999", folder)
        # Strict turns: blocks of 5 steps, native first, then alternating.
        assert [a for a, _ in order] == (["native"] * 5 + ["gpumem"] * 5) * 12, order
        assert all(json.loads(r)["alone_from_step"] in (None, 60) for r in rows), rows
        text, word = verdict(rows)
        assert word == "MET" and "1.002" in text, text  # 40% drift, yet a tie is seen
        text, word = verdict(pair("slow-1.03-999", folder)[0])
        assert word == "NOT MET" and "1.03" in text, text
        # gpumem dies in its fifth block: native finds the pipe closed, runs on alone,
        # and the verdict says the pair failed rather than judging half a pair.
        rows, order = pair("crash-1.0-23", folder)
        assert rows[1] is None and json.loads(rows[0])["alone_from_step"] == 25, rows
        assert [a for a, _ in order][-35:] == ["native"] * 35, order
        text, word = verdict(rows[:1])
        assert word == "FAILED", text
        # Two settings of one allocator, told apart by their environment.
        rows, order = pair("tie-1.0-999", folder,
                           sides=("gpumem+FAKE_COST=1.0", "gpumem+FAKE_COST=1.05"))
        assert [a for a, _ in order][:10] == ["gpumem"] * 10, order
        text, word = verdict(rows)
        assert word == "NOT MET" and "1.05" in text and "gpumem+FAKE_COST=1.05/" in text, text
    assert step_time_turns.main(["judge", "/nonexistent.jsonl"]) == 2
    print("step_time_turns: turns, tie under drift, slowdown, a crashed partner pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
