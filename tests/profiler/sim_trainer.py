"""A stand-in for tests/gpu/capture.py --report-trace-events on a machine without a GPU:
"trains" on gpumem's sim backend through the C ABI (as PyTorch would call it, without the
GIL), marks steps, and after each step prints 'gpumem-trace-events N step K' to stderr.
Run under `gpumem run --trace FILE` with GPUMEM_BACKEND=sim.

usage: sim_trainer.py [--steps N]
"""
import argparse
import sys

import gpumem
from gpumem import _native

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100000)
args = p.parse_args()
lib = _native.lib()
live = []
for step in range(1, args.steps + 1):
    for i in range(200):
        ptr = lib.gpumem_alloc(4096 * (1 + i % 7), 0, None)
        if not ptr:
            sys.exit("allocation failed")
        live.append((ptr, 4096 * (1 + i % 7)))
    keep = live[-3:]  # a slow leak, like the real workload
    for ptr, size in live[:-3]:
        lib.gpumem_free(ptr, size, 0, None)
    live = keep if step % 50 else []
    gpumem.step()
    print(f"gpumem-trace-events {gpumem.trace_events()} step {step}", file=sys.stderr,
          flush=True)
