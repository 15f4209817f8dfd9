#!/usr/bin/env python3
"""Another process's memory on the same GPU, named. A holder process takes HOLD GiB of
GPU 0; then, beside it:

1. a short training run under `gpumem run --profile-only`: its report's outside-allocator
   section must name the holder's pid and bytes among other processes (NVML, read at the
   peak step), and what neither this process nor the others account for must be within
   1% of the driver's figure;
2. a run under gpumem's allocator that allocates past a cap: the verdict the dying
   process prints must name the holder's pid.

Prints a Markdown summary; exit 1 when a check fails.

usage: other_process_check.py GPUMEM_CLI [--hold-gib 2]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ENV = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
           PYTHONUNBUFFERED="1")

HOLDER = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
print("ready", flush=True)
time.sleep(600)
"""

TRAIN = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 4096)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(8):
    loss = model(torch.randn(256, 4096, device="cuda")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained", flush=True)
"""

GROW = """
import torch
kept = []
while True:
    kept.append(torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda"))
"""


def start_holder(hold_gib):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(hold_gib)], env=ENV,
                         stdout=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "ready":
        p.kill()
        raise SystemExit("the holder process did not start")
    return p


def check_report(cli, folder, holder_pid, hold_bytes):
    trace = os.path.join(folder, "train.gpumem")
    p = subprocess.run([cli, "run", "--profile-only", "--trace", trace, "--", sys.executable,
                        "-c", TRAIN], env=ENV, capture_output=True, text=True, timeout=600)
    r = subprocess.run([cli, "report", "--json", trace], capture_output=True, text=True)
    if p.returncode != 0 or r.returncode != 0:
        print(f"- report: WRONG; run exit {p.returncode}, report exit {r.returncode}")
        print("    " + (p.stderr + r.stderr)[-1500:].replace("\n", "\n    "))
        return False
    peak = (json.loads(r.stdout).get("outside_allocator") or {}).get("peak") or {}
    proc = peak.get("processes") or {}
    others = {o["pid"]: o["bytes"] for o in proc.get("others", [])}
    used = peak.get("driver_used") or 0
    unnamed = proc.get("unnamed")
    ok = (proc.get("at_moment") is True and others.get(holder_pid, 0) >= hold_bytes
          and unnamed is not None and abs(unnamed) <= 0.01 * used)
    gib = 1 << 30
    print(f"- report: {'right' if ok else 'WRONG'}; at step {proc.get('step')}: driver "
          f"{used / gib:.2f} GiB in use, allocator {peak.get('allocator_reserved', 0) / gib:.2f}"
          f" GiB, this process {(proc.get('self') or 0) / gib:.2f} GiB (context, kernels and "
          f"unseen {(proc.get('context_and_unseen') or 0) / gib:.2f} GiB), other processes "
          f"{others} (holder pid {holder_pid}), named by neither "
          f"{(unnamed or 0) / 2**20:.1f} MiB")
    return ok


def check_verdict(cli, folder, holder_pid):
    env = dict(ENV, GPUMEM_CAPACITY="6G")
    p = subprocess.run([cli, "run", "--trace", os.path.join(folder, "grow.gpumem"), "--",
                        sys.executable, "-c", GROW], env=env, capture_output=True, text=True,
                       timeout=600)
    lines = [line for line in p.stderr.splitlines() if "other processes" in line]
    ok = p.returncode != 0 and any(f"pid {holder_pid} " in line for line in lines)
    print(f"- OOM verdict: {'right' if ok else 'WRONG'}; run exit {p.returncode}")
    for line in lines or p.stderr.strip().splitlines()[-8:]:
        print(f"    {line[:300]}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cli", help="the gpumem command")
    parser.add_argument("--hold-gib", type=float, default=2.0)
    args = parser.parse_args()
    print("### another process on the GPU")
    holder = start_holder(args.hold_gib)
    try:
        with tempfile.TemporaryDirectory() as folder:
            ok = check_report(args.cli, folder, holder.pid, int(args.hold_gib * 2**30))
            ok = check_verdict(args.cli, folder, holder.pid) and ok
    finally:
        holder.kill()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
