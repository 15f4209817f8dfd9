"""After `pip install` into the environment that holds torch: a short training run started
with GPUMEM=1 and nothing else (no PYTHONPATH, no GPUMEM_LIB_DIR, no `gpumem run`) has
gpumem as PyTorch's allocator. Prints one JSON line; exits 1 where it is not so.

usage: GPUMEM=1 python pip_gpumem1_check.py
"""
import json
import sys

import torch

net = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                          torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
for _ in range(5):
    loss = net(torch.randn(256, 1024, device="cuda")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()

import gpumem  # noqa: E402  (already imported by the .pth hook; this only names it)

row = {"version": gpumem.__version__, "installed": gpumem.installed(),
       "backend": torch.cuda.memory.get_allocator_backend(),
       "library": gpumem._native.find_library(),
       "memory_allocated": torch.cuda.memory_allocated(),
       "gpumem_allocated": gpumem.stats()["allocated_bytes"]}
print(json.dumps(row))
ok = (row["installed"] and row["backend"] == "pluggable"
      and row["memory_allocated"] == row["gpumem_allocated"] > 0
      and "site-packages" in row["library"])
sys.exit(0 if ok else 1)
