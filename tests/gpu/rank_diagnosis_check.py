"""The merged diagnosis over every rank of one torchrun job, checked. Runs
multi_gpu_train.py on every GPU twice under `gpumem run` with a trace per rank:

1. profile-only, one rank leaking (--leak-rank): `gpumem report --json` over the rank
   traces must name that rank as differing, with the line that allocates the logits it
   keeps (`# LOGITS` in multi_gpu_train.py) as its leak site, and no other rank leaking; each rank's memory outside the allocator
   is printed beside the driver's figure.
2. gpumem's allocator, one rank under a small cap (--cap-rank): that rank dies of an OOM,
   its trace holds the verdict, the others' traces read back whole, and the merged
   report names the capped rank as the first to run out.

Prints a Markdown summary; exit 1 when a check fails.

usage: rank_diagnosis_check.py GPUMEM_CLI [--layout L] [--steps 60] [--gpus N]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
           NVSHMEM_DISABLE_NVLS="1", PYTHONUNBUFFERED="1", GPUMEM_STACKS="python")


def leak_line():
    """The line that allocates what the leak keeps (a trace names where memory was made;
    the view kept at `# LEAK` allocates nothing)."""
    with open(os.path.join(HERE, "multi_gpu_train.py")) as f:
        return next(i + 1 for i, line in enumerate(f) if "# LOGITS" in line)


def job(cli, mode, folder, gpus, extra):
    trace = os.path.join(folder, "run-%r.gpumem")
    cmd = [cli, "run"] + (["--profile-only"] if mode == "profile" else []) + [
        "--trace", trace, "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={gpus}", os.path.join(HERE, "multi_gpu_train.py")] + extra
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)
    traces = sorted(t for t in glob.glob(os.path.join(folder, "run-*.gpumem"))
                    if ".cupti." not in t)
    r = subprocess.run([cli, "report", "--json"] + traces, capture_output=True, text=True)
    return p, traces, (json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr})


def check_leak(cli, args, folder, leak_rank):
    p, traces, report = job(cli, "profile", folder, args.gpus,
                            [args.layout, "--steps", str(args.steps), "--leak-rank",
                             str(leak_rank)])
    merged = report.get("merged", {})
    ranks = merged.get("ranks", [])
    site = f"multi_gpu_train.py:{leak_line()}"
    leaking = [r["rank"] for r in ranks if r.get("leak_bytes_per_step", 0) > 0]
    named = [r for r in ranks if r["rank"] == leak_rank and site in r.get("leak_site", "")]
    ok = p.returncode == 0 and len(traces) == args.gpus and leaking == [leak_rank] and named
    print(f"- leak on rank {leak_rank}: {'right' if ok else 'WRONG'}; ranks leaking: "
          f"{leaking}; site named: {bool(named)}; run exit {p.returncode}")
    for r in ranks:
        print(f"  - rank {r['rank']}: leak site {r.get('leak_site', '')!r}, peak allocated {r['peak_allocated']}, outside the "
              f"allocator {r['outside_allocator']}, leak/step {r['leak_bytes_per_step']}")
    return bool(ok)


def check_oom(cli, args, folder, cap_rank):
    p, traces, report = job(cli, "gpumem", folder, args.gpus,
                            [args.layout, "--steps", str(args.steps), "--cap-rank",
                             str(cap_rank), "--cap-fraction", str(args.cap_fraction)])
    merged = report.get("merged", {})
    first = merged.get("first_out", "")
    unread = merged.get("unread", [])
    ok = p.returncode != 0 and first.startswith(f"rank {cap_rank} ") and not unread and \
        "verdict:" in p.stderr
    print(f"- OOM on rank {cap_rank}: {'right' if ok else 'WRONG'}; first out: {first!r}; "
          f"unread traces: {len(unread)}; verdict printed: {'verdict:' in p.stderr}")
    return bool(ok)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cli")
    ap.add_argument("--layout", default="",
                    help="default: 2d on 4 or more GPUs, else fsdp2")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--cap-fraction", type=float, default=0.05)
    args = ap.parse_args()
    args.gpus = args.gpus or torch.cuda.device_count()
    args.layout = args.layout or ("2d" if args.gpus >= 4 and args.gpus % 2 == 0 else "fsdp2")
    last = args.gpus - 1
    print(f"### {args.gpus} ranks, layout {args.layout}\n")
    results = [check_leak(cli=args.cli, args=args, folder=tempfile.mkdtemp(), leak_rank=last),
               check_oom(cli=args.cli, args=args, folder=tempfile.mkdtemp(), cap_rank=last // 2)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
