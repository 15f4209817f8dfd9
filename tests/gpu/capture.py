"""Train the workloads of ../../tests/data (copied from the traces' capture.py) under
PyTorch's native allocator, native with expandable segments, or gpumem, with the same
seeds and deterministic settings, and print one JSON line of figures: per-step loss and
time, peak allocated / reserved, the driver's own used memory, and whether it completed.

usage: capture.py WORKLOAD --allocator native|expandable|gpumem|profile [--cap BYTES]
  profile: PyTorch's native allocator recorded by gpumem's profile-only mode (as with
  GPUMEM_MODE=profile / `gpumem run --profile-only`), gpumem.step() at every step.
  --torch-history python|all: native with PyTorch's own _record_memory_history.
"""
import argparse
import json
import os
import random
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("workload", choices=["gpt2", "resnet50", "varlen_bert", "leaky_mlp"])
p.add_argument("--allocator", required=True,
               choices=["native", "native-again", "expandable", "gpumem", "gpumem-nostitch",
                        "gpumem-cudamalloc", "profile"],
               help="native-again: native a second time, for run-to-run noise")
p.add_argument("--cap", type=int, default=0, help="device memory cap in bytes (0: none)")
p.add_argument("--warmup", type=int, default=3, help="steps left out of the median time")
p.add_argument("--steps", type=int, default=0, help="steps to train (0: the workload's own)")
p.add_argument("--report-trace-events", action="store_true",
               help="gpumem: after each step print 'gpumem-trace-events N step K' to stderr "
                    "(N: events in the trace so far; the kill -9 proof compares against it)")
p.add_argument("--snapshot", default="",
               help="native allocator: pickle PyTorch's memory snapshot (python stacks) here")
p.add_argument("--toggle", type=int, default=0, metavar="N",
               help="alternate every N steps between recording and not, in this one process "
                    "(gpumem with GPUMEM_TRACE: gpumem.pause_trace; --torch-history: "
                    "PyTorch's recorder on and off); each step's state goes to `recording`")
p.add_argument("--torch-history", choices=["python", "all"], default="",
               help="native allocator: record PyTorch's own memory history with these stacks")
p.add_argument("--label", default="", help="name the run in the output (default: --allocator)")
p.add_argument("--turns", default="", metavar="R,W,N",
               help="take turns with another process (tests/gpu/step_time_turns.py): wait "
                    "for a byte on file descriptor R before each block of N steps, write one "
                    "to W after it; once R reaches its end (the other process exited), run on "
                    "alone")
p.add_argument("--thread-times", default="", metavar="PATH",
               help="after each step write one JSON line to PATH: each thread's on-CPU and "
                    "run-queue nanoseconds during the step (/proc/self/task/*/schedstat), by "
                    "thread name, to tell time spent on a thread from time spent waiting")
args = p.parse_args()

# Deterministic kernels, so that the allocator is the only difference between runs.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
if args.allocator == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
if args.allocator == "gpumem-nostitch":
    os.environ["GPUMEM_STITCH"] = "0"
if args.allocator == "gpumem-cudamalloc":
    os.environ["GPUMEM_BACKEND"] = "cudamalloc"
use_gpumem = args.allocator.startswith("gpumem")
# Profile-only: the native allocator, recorded by gpumem (also when started by
# `gpumem run --profile-only`, which sets GPUMEM_MODE=profile).
use_profile = args.allocator == "profile" or os.environ.get("GPUMEM_MODE") == "profile"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from thread_times import ThreadTimes  # noqa: E402
from turns import Turns  # noqa: E402

if use_gpumem:
    import gpumem  # noqa: E402
    gpumem.install()
elif use_profile:
    import gpumem  # noqa: E402
    gpumem.profile()

torch.manual_seed(0)
random.seed(0)
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
dev = torch.device("cuda")


def gpt2(steps=12):
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for _ in range(steps):
        x = torch.randint(0, 50257, (8, 512), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss


def resnet50(steps=12):
    import torchvision
    m = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler()
    for _ in range(steps):
        x = torch.randn(64, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (64,), device=dev)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(m(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        yield loss


def varlen_bert(steps=40):
    from transformers import BertConfig, BertForMaskedLM
    m = BertForMaskedLM(BertConfig()).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    rng = random.Random(1)
    for _ in range(steps):
        b = rng.choice([4, 8, 12, 16, 24, 32])
        s = rng.randint(32, 512)
        x = torch.randint(0, 30522, (b, s), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss


def leaky_mlp(steps=60):
    m = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    history = []
    for _ in range(steps):
        x = torch.randn(256, 1024, device=dev)
        loss = m(x).pow(2).mean()
        loss.backward(retain_graph=True)
        opt.step()
        opt.zero_grad()
        history.append(loss)  # the leak, kept on purpose: it is the workload
        yield loss


WORKLOADS = {"gpt2": gpt2, "resnet50": resnet50, "varlen_bert": varlen_bert,
             "leaky_mlp": leaky_mlp}

torch.zeros(1, device=dev)  # the context and libraries, outside the figures
torch.cuda.synchronize()
free0, total = torch.cuda.mem_get_info()
if args.cap:
    if use_gpumem:
        gpumem.set_capacity(args.cap)
    else:
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap / total))
if not use_gpumem:
    torch.cuda.reset_peak_memory_stats()
else:
    gpumem.reset_peak_stats()

if args.snapshot and not use_gpumem:
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=1000000)
elif args.torch_history and not use_gpumem and not args.toggle:
    torch.cuda.memory._record_memory_history(stacks=args.torch_history)


def set_recording(on):
    if args.torch_history and not use_gpumem:
        if on:
            torch.cuda.memory._record_memory_history(stacks=args.torch_history)
        else:
            torch.cuda.memory._record_memory_history(enabled=None)
    elif use_gpumem or use_profile:
        gpumem.pause_trace(not on)


recording = []
if args.toggle:
    set_recording(False)

try:
    turns = Turns(args.turns) if args.turns else None
except ValueError as e:
    p.error(str(e))

losses, times = [], []
thread_times = ThreadTimes(args.thread_times) if args.thread_times else None
# gpumem only: the backend's maps, unmaps and synchronizes in each step (issue 4: a warm
# steady loop should do none; each synchronize stalls the host's run-ahead).
device_calls, calls_before = [], None


def backend_calls():
    c = gpumem.snapshot(0)["devices"][0]["backend_counters"]
    return [c["maps"], c["unmaps"], c.get("synchronizes", 0)]


if use_gpumem:
    calls_before = backend_calls()
driver_peak = 0
reserved_at_driver_peak = 0
completed, error = True, None
if turns:
    turns.wait(0)
t_prev = time.perf_counter()
try:
    workload = WORKLOADS[args.workload]
    for loss in (workload(args.steps) if args.steps else workload()):
        losses.append(loss.item())  # syncs: the step's work is done
        now = time.perf_counter()
        times.append(now - t_prev)
        if args.toggle:
            recording.append((len(losses) - 1) // args.toggle % 2 == 1)
            on_next = len(losses) // args.toggle % 2 == 1
            if on_next != recording[-1]:
                set_recording(on_next)
        if use_gpumem:
            calls_now = backend_calls()
            device_calls.append([a - b for a, b in zip(calls_now, calls_before)])
            calls_before = calls_now
        used = free0 - torch.cuda.mem_get_info()[0]
        if used > driver_peak:
            driver_peak = used
            reserved_at_driver_peak = (gpumem.stats()["reserved_bytes"]
                                       if use_gpumem
                                       else torch.cuda.memory_reserved())
        if use_gpumem or use_profile:
            gpumem.step()
            if args.report_trace_events:
                # Read after the step's records returned: the trace holds at least this many.
                print(f"gpumem-trace-events {gpumem.trace_events()} step {len(losses)}",
                      file=sys.stderr, flush=True)
        if thread_times:
            thread_times.step(len(losses), recording[-1] if args.toggle else None)
        if turns and len(losses) % turns.steps == 0:
            turns.pass_and_wait(len(losses))
        # The next step starts here: the bookkeeping above (a gpumem snapshot, the driver's
        # free memory, a recording switch, a turn) is not part of any step's time.
        t_prev = time.perf_counter()
except torch.OutOfMemoryError as e:
    completed, error = False, str(e).splitlines()[0][:300]
torch.cuda.synchronize()
if args.snapshot and not use_gpumem:
    import pickle  # noqa: E402
    with open(args.snapshot, "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
    torch.cuda.memory._record_memory_history(enabled=None)

if use_gpumem:
    s = gpumem.stats()
    peak_alloc, peak_res = s["peak_allocated_bytes"], s["peak_reserved_bytes"]
    extra = {"stitches": s["stitch_count"], "trims": s["trim_count"],
             "backend": gpumem.backend(),
             # [maps, unmaps, synchronizes] per step; and summed over the timed steps
             "device_calls_per_step": device_calls,
             "device_calls_after_warmup": [sum(c[i] for c in device_calls[args.warmup:])
                                           for i in range(3)]}
else:
    st = torch.cuda.memory_stats()
    peak_alloc = st["allocated_bytes.all.peak"]
    peak_res = st["reserved_bytes.all.peak"]
    extra = {"num_alloc_retries": st.get("num_alloc_retries")}
steady = sorted(times[args.warmup:]) or sorted(times)
out = {
    "workload": args.workload, "allocator": args.label or args.allocator, "cap": args.cap,
    "completed": completed, "error": error, "steps": len(losses),
    "losses": losses, "step_seconds": [round(t, 6) for t in times],
    **({"recording": recording} if args.toggle else {}),
    **({"turn_steps": turns.steps, "alone_from_step": turns.alone_from} if turns else {}),
    "median_step_seconds": steady[len(steady) // 2] if steady else None,
    "peak_allocated": peak_alloc, "peak_reserved": peak_res,
    "ratio": round(peak_res / max(1, peak_alloc), 4),
    # The driver's view (cuMemGetInfo through torch.cuda.mem_get_info), sampled at step
    # ends: device memory used beyond the context, and what the allocator held then.
    "driver_peak_used": driver_peak, "reserved_at_driver_peak": reserved_at_driver_peak,
    **extra,
}
print(json.dumps(out), flush=True)
