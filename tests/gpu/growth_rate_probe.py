"""Step time of a loop that keeps 8 MiB a step (a replay buffer never trimmed) as what it
keeps grows: each 1,000 steps, the seconds they took and the GiB allocated. Run it
natively and under `gpumem run` (with and without a trace, with and without the CUPTI
tracer) to see which side's step time grows with the memory kept. Under gpumem's allocator
each line adds the device calls those steps made (maps, pages created, host milliseconds
inside driver calls) and the address space reserved, to tell the driver's share apart.

usage: growth_rate_probe.py [SECONDS]   (stops after SECONDS, default 35, or at an OOM)
"""
import sys
import time

import torch


def gpumem_counters():
    """gpumem's backend counters for this device; None where gpumem is not the allocator."""
    try:
        import gpumem
    except ImportError:
        return None
    return gpumem.snapshot()["devices"][0]["backend_counters"] if gpumem.installed() else None


def calls_since(before, after):
    if before is None or after is None:
        return ""
    return (f", {after['maps'] - before['maps']} maps, "
            f"{after['physical_creates'] - before['physical_creates']} pages created, "
            f"{(after['host_call_ns'] - before['host_call_ns']) / 1e6:.0f} ms in driver calls, "
            f"{after['reserved_va_bytes'] / 2**40:.1f} TiB of addresses")


def main():
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 35.0
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1024, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 4)).cuda()
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    buffer = []
    start = last = time.perf_counter()
    counters = gpumem_counters()
    step = 0
    try:
        while time.perf_counter() - start < budget:
            buffer.append(torch.randn(2048, 1024, device="cuda"))
            batch = buffer[-1][torch.randint(0, 2048, (256,), device="cuda")]
            loss = net(batch).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 1000 == 0:
                torch.cuda.synchronize()
                now = time.perf_counter()
                now_counters = gpumem_counters()
                print(f"step {step}: {now - last:.2f} s, "
                      f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB"
                      f"{calls_since(counters, now_counters)}", flush=True)
                last, counters = now, now_counters
    except torch.OutOfMemoryError:
        print(f"out of memory at step {step}", flush=True)


if __name__ == "__main__":
    main()
