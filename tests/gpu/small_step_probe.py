"""Step time of a small model (four 1024-wide linear layers, batch 2048, SGD: a step of one
or two milliseconds), natively or under gpumem (`gpumem run -- python3 ...`), and under
gpumem the stitches its steady steps made. One JSON line.

A working set of ~160 MiB is where the growth budget's share of the peak (1.75 %) is under
one block a step needs: without the budget's floor of pages (CachingAllocatorOptions::
min_budget_pages) such a loop stitched that block every step.

usage: small_step_probe.py [STEPS] [WARMUP]
"""
import json
import statistics
import sys
import time

import torch


def gpumem_stitches():
    try:
        import gpumem
    except ImportError:
        return None
    return gpumem.stats()["stitch_count"] if gpumem.installed() else None


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    times, at_warmup = [], None
    for i in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = net(torch.randn(2048, 1024, device="cuda"))
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if i == warmup:
            at_warmup = gpumem_stitches()
    end = gpumem_stitches()
    print(json.dumps({
        "allocator": "gpumem" if end is not None else "native",
        "median_step_ms": 1e3 * statistics.median(times[warmup:]),
        "steady_stitches": None if end is None else end - at_warmup,
        "steady_steps": steps - warmup - 1,
    }))


if __name__ == "__main__":
    main()
