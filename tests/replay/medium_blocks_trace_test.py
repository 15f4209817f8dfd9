"""bench/research/medium_blocks_trace.py writes the trace its docstring describes: replayed,
its peak is the points, the centroids, two distance matrices, the indices and every pass's
kept block but the last pass's.
usage: medium_blocks_trace_test.py GPUMEM_BINARY"""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
tool = os.path.join(here, "..", "..", "bench", "research", "medium_blocks_trace.py")
sys.path.insert(0, os.path.dirname(tool))
import medium_blocks_trace as mb  # noqa: E402


def main():
    passes = 200
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.trace.tsv.gz")
        subprocess.run([sys.executable, tool, trace, "--passes", str(passes)], check=True)
        out = subprocess.run([sys.argv[1], "replay", "--policy", "pytorch-expandable", "--json",
                              trace], check=True, capture_output=True, text=True).stdout
    peak = json.loads(out)["peak_allocated"]
    expected = (200_000 * 64 * 4 + mb.SMALL + 2 * mb.DISTANCES + mb.INDICES +
                (passes - 1) * mb.KEPT)
    if peak != expected:
        sys.exit(f"peak allocated {peak}, expected {expected}")
    print("ok")


if __name__ == "__main__":
    main()
