"""torch.empty + del loops through Python, native allocator vs gpumem (one process each).

usage: torch_empty_bench.py native|gpumem [ITERATIONS]   (one JSON line per size; the best
of 5 timed loops of ITERATIONS pairs, default 20000)
"""
import json
import sys
import time

allocator = sys.argv[1]
import torch  # noqa: E402
if allocator == "gpumem":
    import gpumem  # noqa: E402
    gpumem.install()
torch.zeros(1, device="cuda")
for size in [512, 64 << 10, 1 << 20, 16 << 20, 256 << 20]:
    for _ in range(100):  # warm
        t = torch.empty(size, dtype=torch.uint8, device="cuda")
        del t
    best = None
    for _rep in range(5):
        n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
        t0 = time.perf_counter()
        for _ in range(n):
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            del t
        dt = (time.perf_counter() - t0) / n * 1e6
        best = dt if best is None else min(best, dt)
    print(json.dumps({"allocator": allocator, "size": size, "us_per_iter": best}), flush=True)
