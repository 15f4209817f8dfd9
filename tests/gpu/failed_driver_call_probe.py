"""Whether the CUPTI tracer records a device allocation that fails when a program calls
the driver itself (a CUDA extension's cuMemAlloc through ctypes): asks for 1 TiB after
PyTorch made its context, then prints what the driver said. Run under
`gpumem run --profile-only --trace T -- python3 failed_driver_call_probe.py`, then read
T's failed allocations with `gpumem report --json T`."""
import ctypes

import torch

torch.ones(1, device="cuda")  # the primary context, current on this thread
driver = ctypes.CDLL("libcuda.so.1")
ptr = ctypes.c_uint64()
status = driver.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 40))
print(f"cuMemAlloc_v2(1 TiB): CUDA error {status}")
