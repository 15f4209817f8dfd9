"""A Llama-style model trained by torchrun ranks, written as users write it (no gpumem
call), with one of five parallel layouts: DDP, FSDP2 (`fully_shard` per block, parameters
resharded after forward or kept), tensor parallel (DTensor, `parallelize_module`), or
both on a 2-D mesh (FSDP2 over the first dimension, tensor parallel over pairs of ranks).
For the diagnosis checks one rank can be made to leak (it keeps a slice of its logits
every step, which keeps the whole tensor) or to run under a cap of its own.
Batches of varying length, bf16 autocast. Each rank prints one JSON line: its losses, step
times, and the memory figures PyTorch's API gives for the current device (what gpumem
answers under its allocator), plus gpumem's own where it is installed.

usage: torchrun --nproc_per_node N multi_gpu_train.py {ddp,fsdp2,fsdp2-keep,tp,2d}
       [--steps 40] [--warmup 10] [--dim 1024] [--layers 8] [--leak-rank R]
       [--cap-rank R --cap-fraction F] [--phases]
  --phases: host and device time of each step's phases (phase_clock.py), in each row.
  MULTIGPU_TURNS=FOLDER,ROLE,N: take turns with another job on the same GPUs, N steps
  at a time, rank by rank (turns.fifo_turns; multi_gpu_matrix.py --turns sets it).
"""
import argparse
import json
import os
import random
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from gc_clock import GcClock
from phase_clock import PhaseClock, cuda_event
from turns import fifo_turns

VOCAB = 32000


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.norm1(x)
        # -1 heads: under tensor parallel each rank holds its share of the heads.
        q, k, v = (p(h).view(b, s, -1, self.head_dim).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.down(F.silu(self.up(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, dim, layers, heads=16):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # LOGITS: allocated here, what the leak keeps


TP = 2  # tensor-parallel ranks per data-parallel group in the 2-D layout

def tp_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
            "o": RowwiseParallel(), "up": ColwiseParallel(), "down": RowwiseParallel()}


def parallelize_2d(model):
    """FSDP2 over the data-parallel dimension of a (world / 2) x 2 mesh, tensor parallel
    within each pair of ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module
    mesh = init_device_mesh("cuda", (dist.get_world_size() // TP, TP),
                            mesh_dim_names=("dp", "tp"))
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], tp_plan())
        fully_shard(block, mesh=mesh["dp"])
    return fully_shard(model, mesh=mesh["dp"])


def parallelize(model, layout, device):
    world = dist.get_world_size()
    if layout == "2d":
        return parallelize_2d(model)
    if layout == "ddp":
        return nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    if layout.startswith("fsdp2"):
        from torch.distributed.fsdp import fully_shard
        reshard = layout == "fsdp2"
        for block in model.blocks:
            fully_shard(block, reshard_after_forward=reshard)
        return fully_shard(model, reshard_after_forward=reshard)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    mesh = init_device_mesh("cuda", (world,))
    for block in model.blocks:
        parallelize_module(block, mesh, tp_plan())
    return model


def batch(step, rank, layout, device, size=8):
    # Tensor-parallel ranks share each batch; data-parallel ranks each get their own.
    group = {"tp": 0, "2d": rank // TP}.get(layout, rank)
    rng = random.Random(step * 1000 + group)
    length = rng.choice(range(128, 1025, 64))
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    tokens = torch.randint(0, VOCAB, (size, length + 1), generator=g)
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def gpumem_device():
    """gpumem's snapshot of this rank's device; None where gpumem is not the allocator."""
    try:
        import gpumem
    except ImportError:
        return None
    return gpumem.snapshot()["devices"][0] if gpumem.installed() else None


def device_counters():
    """gpumem's device calls so far (backend counters), None without gpumem."""
    device = gpumem_device()
    return device["backend_counters"] if device is not None else None


# Per-step deltas of gpumem's device calls (step_calls): what each step asked of the driver.
STEP_CALLS = ("maps", "unmaps", "stream_waits", "synchronizes", "host_call_ns",
              "background_call_ns")


def step_call_deltas(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in STEP_CALLS}


def figures():
    free, total = torch.cuda.mem_get_info()
    out = {"device": torch.cuda.current_device(),
           "allocated": torch.cuda.memory_allocated(),
           "peak_allocated": torch.cuda.max_memory_allocated(),
           "peak_reserved": torch.cuda.max_memory_reserved(),
           "driver_used": total - free}
    device = gpumem_device()
    if device is not None:
        import gpumem
        stats = gpumem.stats()
        out["gpumem_allocated"] = stats["allocated_bytes"]
        out["gpumem_stats"] = stats  # stitches, trims, retries: what a slow step did
        # Device calls a slow step made: host synchronizes, stream waits, maps.
        out["backend_counters"] = device["backend_counters"]
        out["page_bytes"] = device.get("page_bytes")  # GPUMEM_PAGE_SIZE or the device's default
        out["cross_stream"] = {k: device.get(k, 0) for k in
                               ("cross_stream_lends", "cross_stream_borrows")}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("layout", choices=["ddp", "fsdp2", "fsdp2-keep", "tp", "2d"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--leak-rank", type=int, default=-1,
                    help="this rank keeps a slice of its logits every step (a leak)")
    ap.add_argument("--cap-rank", type=int, default=-1,
                    help="this rank runs under set_per_process_memory_fraction(--cap-fraction)")
    ap.add_argument("--cap-fraction", type=float, default=0.05)
    ap.add_argument("--touch-device0", action="store_true",
                    help="every rank touches cuda:0 before set_device (the classic mistake: "
                         "a CUDA context of each rank on GPU 0)")
    ap.add_argument("--group-each-step", action="store_true",
                    help="every rank averages its loss for the log over a process group "
                         "it makes each step and never destroys (an NCCL communicator a "
                         "step, outside the allocator)")
    ap.add_argument("--leave-free-gib", type=float, default=0,
                    help="after the first step, fill the GPU but this much (what a larger "
                         "model would hold), so that memory growing outside the allocator "
                         "runs out in a few steps")
    ap.add_argument("--phases", action="store_true",
                    help="time each step's forward, backward, optimizer and loss read")
    args = ap.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    turns, first = (fifo_turns(os.environ["MULTIGPU_TURNS"], rank)
                    if os.environ.get("MULTIGPU_TURNS") else (None, True))
    device = torch.device("cuda", local)
    if args.touch_device0:
        # A CUDA context on GPU 0 and no allocation, as a stray torch.cuda call before
        # set_device makes one (the allocator's figures stay on the rank's own GPU).
        torch.cuda.mem_get_info(0)
    torch.cuda.set_device(device)
    if rank == args.cap_rank:
        torch.cuda.set_per_process_memory_fraction(args.cap_fraction, device)
    dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(0)
    model = parallelize(Model(args.dim, args.layers).to(device), args.layout, device)
    # Tensor parallel leaves some parameters plain tensors beside the DTensors, which the
    # fused multi-tensor (foreach) update refuses to mix.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=args.layout != "tp")
    losses, times, kept = [], [], []
    if turns and not first:
        turns.wait(0)
    warm_counters = None
    gc_clock = GcClock()
    gc_ms, gc_counts = [], None
    step_calls = {k: [] for k in STEP_CALLS}  # gpumem's device calls in each timed step
    phase_clock, phases = PhaseClock(cuda_event) if args.phases else None, []
    mark = phase_clock.mark if phase_clock else lambda name: None
    for step in range(args.steps):
        if step == args.warmup:
            warm_counters = device_counters()
            gc_counts = list(gc_clock.collections)
        tokens, targets = batch(step, rank, args.layout, device)
        torch.cuda.synchronize()
        calls_before = device_counters()  # read outside the timed part
        gc_clock.take_step_ms()  # collections outside the timed part are not the step's
        start = time.perf_counter()
        if phase_clock:
            phase_clock.start()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens)
        if rank == args.leak_rank:
            kept.append(logits[:, -1:])  # LEAK: a view keeps the whole logits tensor
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        mark("forward")
        loss.backward()
        mark("backward")
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark("optimizer")
        if args.group_each_step:
            group = dist.new_group()  # GROUP: a communicator each step, never destroyed
            logged = loss.detach().clone()
            dist.all_reduce(logged, group=group)  # GROUP: its first collective
        losses.append(loss.item())
        mark("loss read")
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            if phase_clock:
                phases.append(phase_clock.finish())
            gc_ms.append(round(gc_clock.take_step_ms(), 3))
            if calls_before is not None:
                for k, v in step_call_deltas(calls_before, device_counters()).items():
                    step_calls[k].append(v)
        if step == 0 and args.leave_free_gib > 0:
            free, _ = torch.cuda.mem_get_info(device)
            filler = torch.empty(max(0, free - int(args.leave_free_gib * 2**30)),  # noqa: F841
                                 dtype=torch.uint8, device=device)
        if turns and (step + 1) % turns.steps == 0:
            turns.pass_and_wait(step + 1)
    row = {"layout": args.layout, "rank": rank, "world": dist.get_world_size(),
           "allocator": torch.cuda.memory.get_allocator_backend(), "losses": losses,
           "step_times": times, "warmup": args.warmup, **figures(),
           # Python's collections in the timed steps: ms each step, count per generation.
           "gc_ms": gc_ms,
           "gc_collections": [a - b for a, b in zip(gc_clock.collections, gc_counts)]
           if gc_counts is not None else None,
           "step_maps": step_calls["maps"] or None,
           "step_calls": step_calls if step_calls["maps"] else None,
           "phases": phases or None}
    gc_clock.close()
    if warm_counters is not None:  # the timed steps' device calls alone
        row["timed_counters"] = {k: v - warm_counters.get(k, 0)
                                 for k, v in row.get("backend_counters", {}).items()}
    if turns:  # the other job's memory is on the same GPU: the driver's figure is both
        row.update(turn_steps=turns.steps, alone_from_step=turns.alone_from,
                   driver_used=None)
    # Ranks share torchrun's stdout, and a row longer than a pipe's atomic write can be
    # cut by another rank's: a folder named by the launcher gets one file per rank.
    rows_dir = os.environ.get("MULTIGPU_ROWS")
    if rows_dir:
        with open(os.path.join(rows_dir, f"rank{rank}.json"), "w") as f:
            json.dump(row, f)
    else:
        print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
