"""A small DDP model trained by two ranks over NCCL (run by torchrun under `gpumem run`
from ddp_check.sh). Rank 1 keeps a little more per step than rank 0 (a history of
outputs), so the merged report has an imbalance to show. Prints one line per rank.
DDP_BACKEND=gloo: both ranks may share one GPU (NCCL refuses two ranks on one device).
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
gpu = local_rank % torch.cuda.device_count()
torch.cuda.set_device(gpu)
dist.init_process_group(os.environ.get("DDP_BACKEND", "nccl"))
dev = torch.device("cuda", gpu)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(dev),
            device_ids=[gpu])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []
steps = int(os.environ.get("DDP_STEPS", "30"))
for step in range(steps):
    x = torch.randn(256, 1024, device=dev)
    out = model(x)
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if rank == 1:
        kept.append(out.detach())  # rank 1 leaks a little: the merged view should show it
    try:
        import gpumem
        gpumem.step()
        events = gpumem.trace_events()
    except ImportError:
        events = -1
torch.cuda.synchronize()
dist.barrier()
print(f"rank {rank}: {steps} steps, loss {loss.item():.4f}, trace events {events}", flush=True)
dist.destroy_process_group()
