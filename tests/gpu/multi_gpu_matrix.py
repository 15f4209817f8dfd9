"""The multi-GPU matrix: multi_gpu_train.py under torchrun on every GPU of the machine, for
each layout (DDP, FSDP2 resharding and keeping parameters, tensor parallel), under
PyTorch's allocator and `gpumem run`, taking turns for --rounds rounds so that drift
hits both. Prints a Markdown table per layout: same losses (rank 0, first round), each
rank's figures under gpumem (device = local rank, memory_allocated = gpumem's own, peak
reserved / peak allocated), the memory the driver reports per rank, and step time
gpumem / native as the geometric mean of paired round ratios with a 95% interval.

usage: multi_gpu_matrix.py GPUMEM_CLI [--layouts ddp,fsdp2,fsdp2-keep,tp] [--rounds 3]
                           [--steps 40] [--jsonl FILE] [--variant NAME:VAR=VALUE,...]...
  --variant: gpumem again with these environment variables (e.g.
  nostitch:GPUMEM_STITCH=0), taking its turn in every round after native and gpumem, and
  judged against the same round's native run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from step_time_ab import goal_word, paired_interval  # noqa: E402

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
LOSS_TOLERANCE = 1e-2  # relative; bf16 autocast, and cuBLAS may pick other kernels


def launch(cli, mode, layout, gpus, steps, port, extra_env=None):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={gpus}", f"--master_port={port}",
                os.path.join(HERE, "multi_gpu_train.py"), layout, "--steps", str(steps)]
    cmd = torchrun if mode == "native" else [cli, "run", "--"] + torchrun
    with tempfile.TemporaryDirectory() as rows_dir:
        env = dict(os.environ, **NO_MULTICAST, PYTHONUNBUFFERED="1", MULTIGPU_ROWS=rows_dir,
                   **(extra_env or {}))
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        rows = []
        for name in sorted(os.listdir(rows_dir)):
            with open(os.path.join(rows_dir, name)) as f:
                rows.append(dict(json.load(f), mode=mode))
    if p.returncode != 0 or len(rows) != gpus:
        # torchrun's summary hides the ranks' exceptions: those lines first.
        errors = [l for l in p.stderr.splitlines() if "Error" in l and "error_file" not in l]
        tail = "\n".join(list(dict.fromkeys(errors))[:8] + p.stderr.splitlines()[-15:])
        print(f"{layout} {mode}: exit {p.returncode}, {len(rows)} ranks reported\n{tail}",
              file=sys.stderr, flush=True)
    return rows


def losses_match(native, gpumem):
    a = next((r["losses"] for r in native if r["rank"] == 0), None)
    b = next((r["losses"] for r in gpumem if r["rank"] == 0), None)
    if not a or not b or len(a) != len(b):
        return False, float("nan")
    worst = max(abs(x - y) / max(abs(x), 1e-9) for x, y in zip(a, b))
    return worst <= LOSS_TOLERANCE, worst


def rank_figures(rows):
    """Per rank under gpumem: right device, gpumem's figures in PyTorch's API, ratio."""
    out = []
    for r in sorted(rows, key=lambda r: r["rank"]):
        same = abs(r.get("gpumem_allocated", -1) - r["allocated"]) <= (1 << 20)
        right = r["device"] == r["rank"] % max(1, r["world"]) and r["peak_allocated"] > 0 and same
        ratio = r["peak_reserved"] / max(1, r["peak_allocated"])
        out.append((r["rank"], right, ratio, r["driver_used"]))
    return out


def run_time_ratio(native_times, gpumem_times):
    """gpumem over native for one round. Step k trains the same batch in every run
    (multi_gpu_train.batch), and batch lengths vary 8-fold, so the runs are compared over
    the same steps: the time they took together. Runs of unequal length (one died):
    their median steps."""
    if len(native_times) == len(gpumem_times):
        return sum(gpumem_times) / sum(native_times)
    return statistics.median(gpumem_times) / statistics.median(native_times)


def step_ratio(rounds):
    """Paired per-round ratios of rank 0's time over the timed steps, gpumem over native."""
    ratios = []
    for native, gpumem in rounds:
        n = next((r for r in native if r["rank"] == 0), None)
        g = next((r for r in gpumem if r["rank"] == 0), None)
        if n and g and n["step_times"] and g["step_times"]:
            ratios.append(run_time_ratio(n["step_times"], g["step_times"]))
    return paired_interval(ratios) if len(ratios) >= 2 else None


def device_calls(rounds, name="gpumem"):
    """What gpumem's runs asked of the device per step, each rank of each round: the
    spread of stitches, page maps, stream waits and host synchronizes."""
    per = {"stitches": [], "borrows": [], "maps": [], "unmaps": [], "stream waits": [],
           "synchronizes": []}
    for _, gpumem in rounds:
        for r in gpumem:
            steps = max(1, len(r.get("losses", [])))
            counters = r.get("backend_counters", {})
            per["stitches"].append(r.get("gpumem_stats", {}).get("stitch_count", 0) / steps)
            per["borrows"].append(
                r.get("cross_stream", {}).get("cross_stream_borrows", 0) / steps)
            per["maps"].append(counters.get("maps", 0) / steps)
            per["unmaps"].append(counters.get("unmaps", 0) / steps)
            per["stream waits"].append(counters.get("stream_waits", 0) / steps)
            per["synchronizes"].append(counters.get("synchronizes", 0) / steps)
    if not per["maps"]:
        return ""
    return f"- {name}'s device calls per step (every rank and round, whole run): " + "; ".join(
        f"{k} {min(v):.1f}-{max(v):.1f}" for k, v in per.items())


def step_line(name, rounds):
    """Step time of `name` over native, paired by round, with its goal; None without pairs."""
    r = step_ratio(rounds)
    if not r:
        return None
    point, low, high = r
    return (f"- time of the timed steps {name}/native over {len(rounds)} rounds: {point:.3f} "
            f"[{low:.3f}, {high:.3f}]; within 1%: {goal_word(low, high, 1)}")


def summarize(layout, rounds):
    native, gpumem = rounds[0]
    ok, worst = losses_match(native, gpumem)
    lines = [f"### {layout}", "", f"- same losses (rank 0, max relative difference "
             f"{worst:.2e}, tolerance {LOSS_TOLERANCE:g}): {'yes' if ok else 'NO'}"]
    good = bool(gpumem)
    for rank, right, ratio, driver in rank_figures(gpumem):
        n = next((r for r in native if r["rank"] == rank), None)
        native_ratio = n["peak_reserved"] / max(1, n["peak_allocated"]) if n else float("nan")
        lines.append(f"- rank {rank}: figures right {'yes' if right else 'NO'}; peak "
                     f"reserved/allocated {ratio:.3f} (native {native_ratio:.3f}); driver "
                     f"in use {driver / 2**30:.2f} GiB (native "
                     f"{(n['driver_used'] if n else 0) / 2**30:.2f} GiB)")
        good = good and right and ratio <= 1.02
    lines += [line for line in (step_line("gpumem", rounds), device_calls(rounds)) if line]
    return "\n".join(lines) + "\n", ok and good


def parse_variant(text):
    """'nostitch:GPUMEM_STITCH=0,GPUMEM_THREAD_CACHE=0' -> ('nostitch', {...})."""
    name, _, assignments = text.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if "=" in a)
    if not name or not env:
        raise SystemExit(f"--variant {text!r}: expected NAME:VAR=VALUE[,VAR=VALUE]")
    return name, env


def summarize_variant(name, rounds, variant_rows):
    """A variant's figures and step time against the native run of its own round."""
    pairs = [(native, rows) for (native, _), rows in zip(rounds, variant_rows)]
    lines = []
    for rank, right, ratio, driver in rank_figures(pairs[0][1] if pairs else []):
        lines.append(f"- {name}, rank {rank}: figures right {'yes' if right else 'NO'}; peak "
                     f"reserved/allocated {ratio:.3f}; driver in use {driver / 2**30:.2f} GiB")
    lines += [line for line in (step_line(name, pairs), device_calls(pairs, name)) if line]
    return "\n".join(lines) + "\n" if lines else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cli")
    ap.add_argument("--layouts", default="ddp,fsdp2,fsdp2-keep,tp")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--gpus", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--jsonl", default="")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:VAR=VALUE,...: gpumem again with this environment")
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    gpus = args.gpus or int(subprocess.check_output(
        [sys.executable, "-c", "import torch;print(torch.cuda.device_count())"]).strip())
    out = open(args.jsonl, "w") if args.jsonl else None
    failed = 0
    for layout in args.layouts.split(","):
        rounds, variant_rows = [], {name: [] for name, _ in variants}
        for i in range(args.rounds):
            port = 29500 + 8 * i
            pair = [launch(args.cli, mode, layout, gpus, args.steps, port + j)
                    for j, mode in enumerate(("native", "gpumem"))]
            rounds.append(tuple(pair))
            runs = pair[0] + pair[1]
            for j, (name, env) in enumerate(variants):
                rows = [dict(r, mode=name) for r in
                        launch(args.cli, "gpumem", layout, gpus, args.steps, port + 2 + j, env)]
                variant_rows[name].append(rows)
                runs += rows
            for row in runs:
                print(json.dumps(dict(row, round=i)), file=out or sys.stderr, flush=True)
        text, ok = summarize(layout, rounds)
        for name, _ in variants:
            text += summarize_variant(name, rounds, variant_rows[name])
        print(text, flush=True)
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
