"""offline_plan_bound.py: exact on small cases, a valid plan on a real trace, and a clear
error on a file that is not a trace."""
import gzip
import io
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "bench", "research"))
import offline_plan_bound as opb  # noqa: E402

DATA = os.path.join(here, "..", "data")


def write_trace(d, rows):
    path = os.path.join(d, "t.trace.tsv.gz")
    with gzip.open(path, "wt") as f:
        f.write("# seq\taction\taddr\tsize\tstream\ttime_us\tstack\n")
        for i, (action, addr, size) in enumerate(rows):
            f.write(f"{i}\t{action}\t{addr}\t{size}\t0\t{i}\t0\n")
    return path


def main():
    with tempfile.TemporaryDirectory() as d:
        # Two blocks that never live at once share one range; a third alive with both
        # goes beside them: the plan is the peak.
        path = write_trace(d, [("alloc", 1, 4096), ("alloc", 3, 1000), ("free_completed", 1, 4096),
                               ("alloc", 2, 4096), ("free_completed", 2, 4096)])
        blocks, peak = opb.read_lifetimes(path)
        assert peak == 4096 + 1024, peak  # 1000 rounds up to 1024
        placed, top = opb.greedy_by_size(blocks)
        assert top == peak and opb.overlaps(placed) is None, (placed, top)
        # Lifetimes that cross: whatever the order of placement, the plan stays valid and
        # never below the peak.
        path = write_trace(d, [("alloc", 1, 2048), ("alloc", 2, 1024), ("free_completed", 1, 2048),
                               ("alloc", 3, 3072), ("free_completed", 2, 1024),
                               ("free_completed", 3, 3072)])
        blocks, peak = opb.read_lifetimes(path)
        placed, top = opb.greedy_by_size(blocks)
        assert top >= peak and opb.overlaps(placed) is None, (placed, top, peak)
        # Not a trace: a message, not a traceback.
        bad = os.path.join(d, "bad.gz")
        with open(bad, "wb") as f:
            f.write(b"not gzip")
        r = subprocess.run([sys.executable, os.path.join(here, "..", "..", "bench", "research",
                                                         "offline_plan_bound.py"), bad],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "Traceback" not in r.stderr and bad in r.stderr, r
    # A real trace: a valid plan, never below the peak.
    out = io.StringIO()
    with redirect_stdout(out):
        rc = opb.main([os.path.join(DATA, "leaky_mlp.trace.tsv.gz"), "--check"])
    assert rc == 0 and "plan checked" in out.getvalue(), out.getvalue()
    print("offline_plan_bound_test: ok")


if __name__ == "__main__":
    main()
