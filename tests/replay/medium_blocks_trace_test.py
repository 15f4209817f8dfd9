"""bench/research/medium_blocks_trace.py writes the trace its docstring describes: replayed,
its peak is the points, the centroids, two distance matrices, the indices and every pass's
kept block but the last pass's. And gpumem's smallest device for it is below that of
PyTorch's expandable segments, which it is only while blocks of 64 KiB-1 MiB have a heap of
their own (with one heap a stream: 1.081x the peak at 200 passes, against 1.036x).
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
        smallest = subprocess.run([sys.argv[1], "replay", "--policy", "all", "--min-cap",
                                   "--json", trace], check=True, capture_output=True,
                                  text=True).stdout
    peak = json.loads(out)["peak_allocated"]
    ratios = {r["policy"]: r["min_cap_ratio"] for r in map(json.loads, smallest.splitlines())}
    if not ratios["gpumem"] < ratios["pytorch-expandable"]:
        sys.exit(f"smallest devices x peak: {ratios}; gpumem should need less than "
                 "expandable segments (medium blocks kept beside large transient ones)")
    expected = (200_000 * 64 * 4 + mb.SMALL + 2 * mb.DISTANCES + mb.INDICES +
                (passes - 1) * mb.KEPT)
    if peak != expected:
        sys.exit(f"peak allocated {peak}, expected {expected}")
    print("ok")


if __name__ == "__main__":
    main()
