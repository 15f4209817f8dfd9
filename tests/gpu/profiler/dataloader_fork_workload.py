"""A DataLoader whose workers touch CUDA under fork (run by dataloader_fork_check.py).

The parent initializes CUDA, then DataLoader(num_workers=2, fork) workers touch CUDA in
__getitem__, either through PyTorch (MODE torch: PyTorch itself refuses, before the
driver) or straight through the driver (MODE driver: cuMemAlloc_v2 via ctypes, as a
library with its own CUDA calls would; the CUPTI tracer sees it). Errors from the workers
are printed to stderr; the script exits 0 either way.

usage: dataloader_fork_workload.py torch|driver
"""
import ctypes
import sys

import torch
from torch.utils.data import DataLoader, Dataset

MODE = sys.argv[1]
assert MODE in ("torch", "driver"), MODE

torch.zeros(1, device="cuda")  # the parent has CUDA: forked children inherit a dead context
torch.cuda.synchronize()


class TouchesCuda(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if MODE == "torch":
            return torch.ones(1, device="cuda").cpu()
        libcuda = ctypes.CDLL("libcuda.so.1")
        ptr = ctypes.c_uint64(0)
        rc = libcuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
        print(f"worker: cuMemAlloc_v2 returned {rc}", file=sys.stderr, flush=True)
        return torch.tensor([rc])


loader = DataLoader(TouchesCuda(), batch_size=2, num_workers=2,
                    multiprocessing_context="fork")
try:
    for batch in loader:
        print("batch", batch.tolist(), flush=True)
except Exception as e:  # noqa: BLE001 - the worker's error is what this run is about
    print(f"dataloader error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
