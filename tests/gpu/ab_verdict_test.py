"""The GPU A/B verdicts' statistics on made-up data (no GPU needed): step_time_ab.py over
runs paired by round (a clear slowdown, a clear tie, a tie under drift, noise too large to
decide; unpaired runs; bad input exits 2) and overhead_ab.py over toggle blocks of one run
(each recording block against its neighbours, so drift cancels)."""
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
             runs("noisy", "gpumem", [0.066, 0.052, 0.068, 0.055, 0.070, 0.050]) +
             # The machine slows 20% over the series; each gpumem run is 0.2% slower
             # than the native run of its round: only pairing by round sees a tie.
             runs("drift", "native", [0.060 * (1 + 0.04 * i) for i in range(6)]) +
             runs("drift", "gpumem", [0.060 * (1 + 0.04 * i) * 1.002 for i in range(6)]) +
             runs("unpaired", "native", native) +
             runs("unpaired", "gpumem", native[:4]))
    status, text = table(lines)
    assert status == 0, text
    assert "within 1%" in row(text, "tie"), text
    assert "slower" in row(text, "slow"), text
    assert "undecided" in row(text, "noisy"), text
    assert "within 1%" in row(text, "drift") and "paired" in row(text, "drift"), text
    assert "unpaired" in row(text, "unpaired"), text
    assert "undecided" in step_time_ab.verdict(
        *step_time_ab.ratio_interval(
            [0.060 * (1 + 0.04 * i) * 1.002 for i in range(6)],
            [0.060 * (1 + 0.04 * i) for i in range(6)])[1:], 1.0)
    assert "1.0800" in row(text, "slow"), text
    status, text = table(lines, "--within", "10")
    assert "within 10%" in row(text, "slow"), text
    # --warmup judges the steps from that one on: a gpumem run slow only while it
    # settles (its first 12 of 20 steps) is within 1% from step 12.
    settling = [json.dumps({"workload": "settle", "allocator": a, "cap": 0, "completed": True,
                            "median_step_seconds": 0.06,
                            "step_seconds": [0.06 * (1.5 if a == "gpumem" and i < 12 else 1)
                                             * (1 + 0.001 * (i % 3)) for i in range(20)]})
                for _ in range(4) for a in ("native", "gpumem")]
    status, text = table(settling, "--warmup", "0")
    assert "slower" in row(text, "settle"), text
    status, text = table(settling, "--warmup", "12")
    assert "within 1%" in row(text, "settle"), text
    # Runs that ran out of memory or were capped do not count; no baseline is an error.
    status, _ = table(runs("x", "gpumem", [0.05]))
    assert status == 2
    assert step_time_ab.main(["/nonexistent.jsonl"]) == 2
    print("step_time_ab: 7 cases pass")
    check_overhead_blocks()
    return 0


def blocks_of(cost, drift=0.0):
    """80 steps in blocks of 4 alternating off/on, recording costing `cost`, the machine
    slowing by `drift` over the run; a block's first step (after the switch) is slow and
    must be left out."""
    steps, recording = [], []
    for i in range(4 * 20):
        on = i // 4 % 2 == 1
        t = 0.100 * (1 + cost if on else 1.0) * (1 + drift * i / 80)
        steps.append(t * (3 if i % 4 == 0 else 1) * (1 + 0.001 * (i % 3)))
        recording.append(on)
    return steps, recording


def overhead_output(*runs):
    """overhead_ab's output for runs given as (steps, recording), one file each."""
    names = []
    for steps, recording in runs:
        row = {"workload": "w", "allocator": "gpumem-python", "completed": True,
               "step_seconds": steps, "recording": recording}
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(json.dumps(row) + "\n")
        names.append(f.name)
    out = io.StringIO()
    with redirect_stdout(out):
        status = overhead_ab.main(names + ["--warmup", "2", "--toggle", "4"])
    for name in names:
        os.unlink(name)
    assert status == 0, out.getvalue()
    return out.getvalue().splitlines()


def verdict_line(steps, recording):
    return next(line for line in overhead_output((steps, recording)) if "goal" in line)


def check_overhead_blocks():
    steps, recording = blocks_of(0.05)
    on, off = overhead_ab.block_medians(steps, recording, warmup=2, toggle=4)
    assert len(on) == 10 and len(off) == 10, (len(on), len(off))
    point, low, high = step_time_ab.ratio_interval(on, off)
    assert abs(point - 1.05) < 0.003 and low > 1.03, (point, low, high)
    assert step_time_ab.verdict(low, high, 3.0) == "slower"
    assert verdict_line(steps, recording).endswith("-> NOT MET")
    assert verdict_line(*blocks_of(0.005)).endswith("-> MET")
    # 30% drift over the run: medians over all blocks could not tell; neighbours can.
    assert verdict_line(*blocks_of(0.005, drift=0.3)).endswith("-> MET")
    on, off = overhead_ab.block_medians(*blocks_of(0.005, drift=0.3), warmup=2, toggle=4)
    assert step_time_ab.verdict(*step_time_ab.ratio_interval(on, off)[1:], 3.0) == "undecided"
    assert verdict_line(*blocks_of(0.05, drift=0.3)).endswith("-> NOT MET")
    pairs = overhead_ab.paired_ratios(*blocks_of(0.02, drift=0.3), warmup=2, toggle=4)
    assert len(pairs) == 10 and all(abs(r - 1.02) < 0.01 for r in pairs), pairs
    assert overhead_ab.main(["/nonexistent.jsonl"]) == 2
    # Two runs pooled: both runs' blocks, one verdict between the two runs' costs.
    lines = overhead_output(blocks_of(0.005), blocks_of(0.015, drift=0.3))
    assert "(20 blocks)" in lines[0] and "(2 runs pooled)" in lines[0], lines
    point = float(lines[0].split("ratio ")[1].split()[0])
    assert 1.005 < point < 1.015 and lines[-1].endswith("-> MET"), lines
    print("overhead_ab: blocks, verdict and pooled runs pass")


if __name__ == "__main__":
    sys.exit(main())
