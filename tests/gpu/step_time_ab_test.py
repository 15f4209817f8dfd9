"""step_time_ab.py's statistics on made-up runs (no GPU needed): a clear slowdown, a clear
tie, and noise too large to decide; bad input exits 2."""
import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
