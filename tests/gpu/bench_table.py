"""Turns gpu_alloc_bench's JSON (--benchmark_out) into the README's table: ns per warm
alloc+free pair for each allocator, and each peer's time as a multiple of gpumem's.

With repetitions run interleaved (--benchmark_repetitions=N
--benchmark_enable_random_interleaving=true), each repetition of a peer is paired with
gpumem's of the same index, and the ratio gets a 95% bootstrap interval over the pairs:
the machine's drift hits both sides of a pair alike.

usage: bench_table.py gpu_alloc_bench.json [torch_empty.jsonl]
"""
import json
import re
import statistics
import sys

from step_time_ab import paired_interval

PEERS = ["CudaMalloc", "CudaMallocAsync", "TorchNative"]
NAME = re.compile(r"BM_AllocFreePair<(\w+)>/(\d+)/min_time:[\d.]+/real_time/threads:(\d+)$")


def repetitions(data):
    """(allocator, size, threads) -> {repetition index: ns per pair}."""
    times = {}
    for b in data["benchmarks"]:
        m = NAME.match(b.get("run_name", b["name"]))
        if not m or b.get("error_occurred") or b.get("run_type", "iteration") != "iteration":
            continue
        key = (m.group(1), int(m.group(2)), int(m.group(3)))
        times.setdefault(key, {})[b.get("repetition_index", 0)] = b["real_time"]
    return times


def size_name(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def cell(peer, ours):
    """A peer's median ns and its multiple of gpumem's, with an interval given pairs."""
    if not peer:
        return "-"
    t = statistics.median(peer.values())
    pairs = [peer[i] / ours[i] for i in peer if i in ours]
    if len(pairs) < 3:
        return f"{t:.0f} ({t / statistics.median(ours.values()):.1f}x)"
    point, low, high = paired_interval(pairs)
    return f"{t:.0f} ({point:.1f}x [{low:.1f}, {high:.1f}])"


def print_pairs(times):
    print("| size | threads | gpumem ns/pair | " +
          " | ".join(f"{p} ns/pair (x gpumem)" for p in PEERS) + " |")
    print("|---|---|---|" + "---|" * len(PEERS))
    for (alloc, size, threads) in sorted(k for k in times if k[0] == "Gpumem"):
        ours = times[(alloc, size, threads)]
        cells = [cell(times.get((p, size, threads)), ours) for p in PEERS]
        print(f"| {size_name(size)} | {threads} | {statistics.median(ours.values()):.0f} | " +
              " | ".join(cells) + " |")
    if any(len(v) > 1 for v in times.values()):
        print(f"\n{max(len(v) for v in times.values())} interleaved repetitions; "
              "x: geometric mean of paired ratios [95% bootstrap interval]")


def print_torch_empty(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    by = {(r["allocator"], r["size"]): r["us_per_iter"] for r in rows}
    if not by:
        return
    print()
    print("| torch.empty + del, size | native us/iter | gpumem us/iter | native / gpumem |")
    print("|---|---|---|---|")
    for size in sorted({s for _, s in by}):
        n, g = by.get(("native", size)), by.get(("gpumem", size))
        if n and g:
            print(f"| {size_name(size)} | {n:.2f} | {g:.2f} | {n / g:.2f} |")


def main(argv):
    print_pairs(repetitions(json.load(open(argv[1]))))
    if len(argv) > 2:
        print_torch_empty(argv[2])


if __name__ == "__main__":
    main(sys.argv)
