"""The GPU A/B verdicts' statistics on made-up data (no GPU needed): step_time_ab.py over
runs (a clear slowdown, a clear tie, noise too large to decide; bad input exits 2) and
overhead_ab.py over toggle blocks of one run."""
import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead_ab  # noqa: E402
import step_time_ab  # noqa: E402


def runs(workload, allocator, medians):
    return [json.dumps({"workload": workload, "allocator": allocator, "cap": 0,
                        "completed": True, "median_step_seconds": m}) for m in medians]


def table(lines, *flags):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    out = io.StringIO()
    with redirect_stdout(out):
        status = step_time_ab.main([f.name, *flags])
    os.unlink(f.name)
    return status, out.getvalue()


def row(text, workload):
    return next(line for line in text.splitlines() if line.startswith(f"| {workload} | gpumem"))


def main():
    native = [0.0600, 0.0603, 0.0598, 0.0601, 0.0602, 0.0599]
    lines = (runs("tie", "native", native) +
             runs("tie", "gpumem", [t * 1.002 for t in reversed(native)]) +
             runs("slow", "native", native) +
             runs("slow", "gpumem", [t * 1.08 for t in native]) +
             runs("noisy", "native", [0.050, 0.070, 0.055, 0.068, 0.052, 0.066]) +
             runs("noisy", "gpumem", [0.051, 0.071, 0.056, 0.069, 0.053, 0.067]))
    status, text = table(lines)
    assert status == 0, text
    assert "within 1%" in row(text, "tie"), text
    assert "slower" in row(text, "slow"), text
    assert "undecided" in row(text, "noisy"), text
    assert "1.0800" in row(text, "slow"), text
    status, text = table(lines, "--within", "10")
    assert "within 10%" in row(text, "slow"), text
    # Runs that ran out of memory or were capped do not count; no baseline is an error.
    status, _ = table(runs("x", "gpumem", [0.05]))
    assert status == 2
    assert step_time_ab.main(["/nonexistent.jsonl"]) == 2
    print("step_time_ab: 4 cases pass")
    check_overhead_blocks()
    return 0


def blocks_of(cost):
    """80 steps in blocks of 4 alternating off/on, recording costing `cost`; a block's
    first step (after the switch) is slow and must be left out."""
    steps, recording = [], []
    for i in range(4 * 20):
        on = i // 4 % 2 == 1
        t = 0.100 * (1 + cost if on else 1.0)
        steps.append(t * (3 if i % 4 == 0 else 1) * (1 + 0.001 * (i % 3)))
        recording.append(on)
    return steps, recording


def verdict_line(steps, recording):
    rows = [{"workload": "w", "allocator": "gpumem-python", "completed": True,
             "step_seconds": steps, "recording": recording}]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    out = io.StringIO()
    with redirect_stdout(out):
        status = overhead_ab.main([f.name, "--warmup", "2", "--toggle", "4"])
    os.unlink(f.name)
    assert status == 0, out.getvalue()
    return next(line for line in out.getvalue().splitlines() if "goal" in line)


def check_overhead_blocks():
    steps, recording = blocks_of(0.05)
    on, off = overhead_ab.block_medians(steps, recording, warmup=2, toggle=4)
    assert len(on) == 10 and len(off) == 10, (len(on), len(off))
    point, low, high = step_time_ab.ratio_interval(on, off)
    assert abs(point - 1.05) < 0.003 and low > 1.03, (point, low, high)
    assert step_time_ab.verdict(low, high, 3.0) == "slower"
    assert verdict_line(steps, recording).endswith("-> NOT MET")
    assert verdict_line(*blocks_of(0.005)).endswith("-> MET")
    assert overhead_ab.main(["/nonexistent.jsonl"]) == 2
    print("overhead_ab: blocks and verdict pass")


if __name__ == "__main__":
    sys.exit(main())
