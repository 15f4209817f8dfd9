"""The merged diagnosis over every rank of one torchrun job, checked. Runs
multi_gpu_train.py on every GPU twice under `gpumem run` with a trace per rank:

1. profile-only, one rank leaking (--leak-rank): `gpumem report --json` over the rank
   traces must name that rank as differing, with the line that allocates the logits it
   keeps (`# LOGITS` in multi_gpu_train.py) as its leak site, and no other rank leaking;
   each rank's memory outside the allocator is printed beside the driver's figure.
2. gpumem's allocator, one rank under a cap of half what a healthy rank of the first job
   held (--cap-rank): that rank dies of an OOM, its trace holds the verdict, the others'
   traces read back whole, and the merged report names the capped rank as the first to
   run out.
3. profile-only, every rank touching cuda:0 before set_device: the merged report
   must name the other ranks' CUDA contexts on rank 0's GPU, by rank, with the fix.
4. (--checks groups) each mode, every rank making a process group each step and never
   destroying it: every rank leaks outside the allocator in NCCL, at the group's line,
   warned of early by every rank, in a run that ends and in one whose GPU is full (said
   by the dying process too).

Prints a Markdown summary; exit 1 when a check fails.

usage: rank_diagnosis_check.py GPUMEM_CLI [--layout L] [--steps 60] [--gpus N]
       [--checks leak,oom,contexts,groups] [--cap-fraction F]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
           NVSHMEM_DISABLE_NVLS="1", PYTHONUNBUFFERED="1", GPUMEM_STACKS="python")


def marked_lines(mark):
    """The lines of multi_gpu_train.py that carry `# MARK`."""
    with open(os.path.join(HERE, "multi_gpu_train.py")) as f:
        return [i + 1 for i, line in enumerate(f) if f"# {mark}" in line]


def leak_line():
    """The line that allocates what the leak keeps (a trace names where memory was made;
    the view kept at `# LEAK` allocates nothing)."""
    return marked_lines("LOGITS")[0]


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
    print_ranks(ranks, report)
    if p.returncode != 0 or "error" in report:
        print_errors(p.stderr + report.get("error", ""))
    return bool(ok), ranks


def print_ranks(ranks, report, verdicts=False):
    """Each rank's row of the merged report, then each trace's driver figures (and its
    verdict)."""
    for r in ranks:
        print(f"  - rank {r['rank']}: leak site {r.get('leak_site', '')!r}, peak allocated "
              f"{r['peak_allocated']}, outside the allocator {r['outside_allocator']}, "
              f"leak/step {r['leak_bytes_per_step']}")
    for t in report.get("traces", []):
        print(driver_line(t.get("outside_allocator") or {}))
        if verdicts:
            print(f"    verdict: {t.get('verdict', '')!s:.300}")


def print_errors(text, lines=15):
    """What a failed job said: its error and gpumem lines (the ranks' own, which torchrun's
    summary at the end leaves out), indented under the check it failed."""
    keys = ("rror", "gpumem", "verdict", "out of memory", "OOM")
    said = [line for line in text.strip().splitlines() if any(k in line for k in keys)]
    for line in said[-lines:]:
        print(f"    {line[:400]}")


def driver_line(outside):
    """Device memory at the step end with the most in use, as the report splits it: what
    the allocator (here PyTorch's, profiled) reserved, what other libraries took (NCCL,
    cuBLAS...), and the rest of the driver's figure. Where NVML was read at that step the
    rest is split too: this process's CUDA context, kernels and unseen calls, and other
    processes; what neither names must be within 1% of the driver's figure."""
    m = outside.get("peak") or {}
    used = m.get("driver_used")
    if not used:
        return f"  - device {outside.get('device')}: the driver's figure unknown"
    gib = 1 << 30
    libs = {k: v for k, v in (m.get("outside") or {}).items() if v and k != "total"}
    seen = m["allocator_reserved"] + (m.get("outside") or {}).get("total", 0)
    line = (f"  - device {outside['device']} at its peak: allocator reserved "
            f"{m['allocator_reserved'] / gib:.2f} GiB, outside it "
            f"{', '.join(f'{k} {v / gib:.2f} GiB' for k, v in libs.items()) or 'nothing'}; "
            f"the driver {used / gib:.2f} GiB in use, of which {seen / used:.1%} seen")
    p = m.get("processes") or {}
    if p.get("context_and_unseen") is None:
        return (line + f", the rest ({(m.get('remainder') or 0) / gib:.2f} GiB) the CUDA "
                "context and unseen (NVML not read at this step)")
    unnamed = p["unnamed"]
    return (line + f"; NVML: this process's CUDA context, kernels and unseen calls "
            f"{p['context_and_unseen'] / gib:.2f} GiB, other processes "
            f"{p['others_total'] / gib:.2f} GiB; named by neither {unnamed / 2**20:.0f} MiB "
            f"({abs(unnamed) / used:.2%}): adds up within 1%: "
            f"{'yes' if abs(unnamed) <= 0.01 * used else 'NO'}")


def cap_fraction(args, ranks, leak_rank):
    """--cap-fraction, else half of what a healthy rank of the leak run held at its peak,
    as a share of the GPU: a rank's need depends on the layout and the number of ranks,
    so a fixed share of a large card may not run out at all."""
    if args.cap_fraction > 0:
        return args.cap_fraction
    healthy = [r["peak_allocated"] for r in ranks if r["rank"] != leak_rank]
    import torch
    total = torch.cuda.get_device_properties(0).total_memory
    return round(0.5 * min(healthy, default=0.1 * total) / total, 4)


def check_oom(cli, args, folder, cap_rank, fraction):
    p, traces, report = job(cli, "gpumem", folder, args.gpus,
                            [args.layout, "--steps", str(args.steps), "--cap-rank",
                             str(cap_rank), "--cap-fraction", str(fraction)])
    merged = report.get("merged", {})
    first = merged.get("first_out", "")
    unread = merged.get("unread", [])
    ok = p.returncode != 0 and first.startswith(f"rank {cap_rank} ") and not unread and \
        "verdict:" in p.stderr
    print(f"- OOM on rank {cap_rank} (capped at {fraction:.2%} of its GPU): "
          f"{'right' if ok else 'WRONG'}; first out: {first!r}; "
          f"unread traces: {len(unread)}; verdict printed: {'verdict:' in p.stderr}")
    if not ok:
        print_errors(p.stderr + report.get("error", ""))
    return bool(ok)


def check_contexts(cli, args, folder):
    """Every rank touches cuda:0 before set_device: rank 0's GPU then holds every
    other rank's CUDA context, which the merged report must name by rank, and no other
    rank's GPU anything of another rank's."""
    p, traces, report = job(cli, "profile", folder, args.gpus,
                            [args.layout, "--steps", "12", "--touch-device0"])
    ranks = report.get("merged", {}).get("ranks", [])
    others = [f"rank {r} (pid" for r in range(1, args.gpus)]
    flagged = [r["rank"] for r in ranks if "other processes hold" in r.get("differs", "")]
    zero = next((r for r in ranks if r["rank"] == 0), {})
    ok = (p.returncode == 0 and len(traces) == args.gpus and flagged == [0]
          and all(o in zero.get("differs", "") for o in others)
          and "set_device(local_rank)" in zero.get("differs", ""))
    print(f"- every rank's context on GPU 0: {'right' if ok else 'WRONG'}; ranks flagged: "
          f"{flagged}; run exit {p.returncode}")
    print(f"  - rank 0: {zero.get('differs', '')[:400]}")
    if p.returncode != 0 or "error" in report:
        print_errors(p.stderr + report.get("error", ""))
    return bool(ok)


def check_groups(cli, args, folder, mode, oom):
    """Every rank makes a process group each step and never destroys it: each step's
    NCCL communicator is memory outside the allocator that grows. Every rank must be
    called leaking outside the allocator in NCCL, at the line that makes the group or its
    first collective (`# GROUP`). Without `oom` the run ends well; with it the GPU is
    filled but 8 GiB after the first step, and the dying process must say the same."""
    os.makedirs(os.path.join(folder, mode + ("-oom" if oom else "")))
    p, traces, report = job(cli, mode, os.path.join(folder, mode + ("-oom" if oom else "")),
                            args.gpus, [args.layout, "--steps", "60" if oom else "30",
                                        "--group-each-step"] +
                            (["--leave-free-gib", "8"] if oom else []))
    ranks = report.get("merged", {}).get("ranks", [])
    sites = [f"multi_gpu_train.py:{n}" for n in marked_lines("GROUP")]
    named = [r["rank"] for r in ranks if "NCCL" in r.get("leak_site", "")
             and any(s in r["leak_site"] for s in sites)]
    said = p.stderr.count("verdict: leak") and "NCCL's memory for" in p.stderr
    warned = p.stderr.count("leak warning at step") >= args.gpus and \
        "NCCL's memory for" in p.stderr
    ok = len(traces) == args.gpus and len(named) == args.gpus and warned and (
        p.returncode != 0 and said if oom else p.returncode == 0)
    print(f"- a process group made each step ({mode}{', the GPU filled' if oom else ''}): "
          f"{'right' if ok else 'WRONG'}; ranks named leaking in NCCL at the group's line: "
          f"{named}; run exit {p.returncode}; warned of early: {warned}; the dying process "
          f"said it: {bool(said)}")
    print_ranks(ranks, report, verdicts=True)
    print_errors(p.stderr + report.get("error", ""))  # warnings too, where it ends well
    return bool(ok)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cli")
    ap.add_argument("--layout", default="",
                    help="default: 2d on 4 or more GPUs, else fsdp2")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--checks", default="leak,oom,contexts",
                    help="which checks to run: leak, oom, contexts, groups")
    ap.add_argument("--modes", default="profile,gpumem",
                    help="the groups check's modes: profile, gpumem")
    ap.add_argument("--cap-fraction", type=float, default=0,
                    help="the capped rank's share of its GPU (default: half of a healthy "
                         "rank's peak allocated in the leak run)")
    args = ap.parse_args()
    import torch
    args.gpus = args.gpus or torch.cuda.device_count()
    args.layout = args.layout or ("2d" if args.gpus >= 4 and args.gpus % 2 == 0 else "fsdp2")
    last = args.gpus - 1
    print(f"### {args.gpus} ranks, layout {args.layout}\n")
    leak_ok, oom_ok, contexts_ok, groups_ok, ranks = True, True, True, True, []
    if "leak" in args.checks:
        leak_ok, ranks = check_leak(cli=args.cli, args=args, folder=tempfile.mkdtemp(),
                                    leak_rank=last)
    if "oom" in args.checks:
        oom_ok = check_oom(cli=args.cli, args=args, folder=tempfile.mkdtemp(),
                           cap_rank=last // 2, fraction=cap_fraction(args, ranks, last))
    if "contexts" in args.checks:
        contexts_ok = check_contexts(cli=args.cli, args=args, folder=tempfile.mkdtemp())
    if "groups" in args.checks:
        folder = tempfile.mkdtemp()
        groups_ok = all([check_groups(args.cli, args, folder, mode, oom)
                         for mode in args.modes.split(",") for oom in (False, True)])
    return 0 if leak_ok and oom_ok and contexts_ok and groups_ok else 1


if __name__ == "__main__":
    sys.exit(main())
