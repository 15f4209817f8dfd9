"""Turns gpu_alloc_bench's JSON (--benchmark_out) into the README's table: ns per warm
alloc+free pair for each allocator, and each peer's time as a multiple of gpumem's.

usage: bench_table.py gpu_alloc_bench.json [torch_empty.jsonl]
"""
import json
import re
import sys

data = json.load(open(sys.argv[1]))
times = {}
for b in data["benchmarks"]:
    m = re.match(r"BM_AllocFreePair<(\w+)>/(\d+)/min_time:[\d.]+/real_time/threads:(\d+)",
                 b["name"])
    if not m or b.get("error_occurred"):
        continue
    times[(m.group(1), int(m.group(2)), int(m.group(3)))] = b["real_time"]  # ns


def size_name(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


peers = ["CudaMalloc", "CudaMallocAsync", "TorchNative"]
print("| size | threads | gpumem ns/pair | " +
      " | ".join(f"{p} ns/pair (x gpumem)" for p in peers) + " |")
print("|---|---|---|" + "---|" * len(peers))
for (alloc, size, threads) in sorted(k for k in times if k[0] == "Gpumem"):
    g = times[(alloc, size, threads)]
    cells = []
    for p in peers:
        t = times.get((p, size, threads))
        cells.append(f"{t:.0f} ({t / g:.1f}x)" if t else "-")
    print(f"| {size_name(size)} | {threads} | {g:.0f} | " + " | ".join(cells) + " |")

if len(sys.argv) > 2:
    rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
    by = {(r["allocator"], r["size"]): r["us_per_iter"] for r in rows}
    print()
    print("| torch.empty + del, size | native us/iter | gpumem us/iter | native / gpumem |")
    print("|---|---|---|---|")
    for size in sorted({s for _, s in by}):
        n, g = by.get(("native", size)), by.get(("gpumem", size))
        if n and g:
            print(f"| {size_name(size)} | {n:.2f} | {g:.2f} | {n / g:.2f} |")
