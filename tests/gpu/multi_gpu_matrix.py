"""The multi-GPU matrix: multi_gpu_train.py under torchrun on every GPU of the machine, for
each layout (DDP, FSDP2 resharding and keeping parameters, tensor parallel), under
PyTorch's allocator and `gpumem run`, for --rounds rounds so that drift hits both.
Prints a Markdown table per layout: same losses (rank 0, first round), each rank's
figures under gpumem (device = local rank, memory_allocated = gpumem's own, peak
reserved / peak allocated), the memory the driver reports per rank, and step time
gpumem / native as a geometric mean of paired ratios with a 95% interval.

Runs one after the other differ by 10-20% on the lent machines, more than the 1% to be
told. With --turns N both jobs live at once on the same GPUs and take turns N steps at
a time, rank r of one with rank r of the other (turns.fifo_turns): each block of gpumem's
steps is compared with native's block of the same steps (the same batches) just before
it. The driver's in-use figure then holds both jobs and is not reported.

usage: multi_gpu_matrix.py GPUMEM_CLI [--layouts ddp,fsdp2,fsdp2-keep,tp] [--rounds 3]
                           [--steps 40] [--turns N] [--train-args "--dim 2048 ..."]
                           [--jsonl FILE] [--variant NAME:VAR=VALUE,...]...
  --variant: gpumem again with these environment variables (e.g.
  nostitch:GPUMEM_STITCH=0), in every round after native and gpumem (with --turns: taking
  turns with a native job of its own), judged against its round's native run.
"""
import argparse
import json
import math
import os
import shlex
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


class Job:
    """One torchrun job of multi_gpu_train.py, native or under `gpumem run`."""

    def __init__(self, cli, mode, layout, gpus, steps, port, train_args=(), extra_env=None):
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={gpus}", f"--master_port={port}",
                    os.path.join(HERE, "multi_gpu_train.py"), layout, "--steps", str(steps),
                    *train_args]
        self.cmd = torchrun if mode == "native" else [cli, "run", "--"] + torchrun
        self.mode, self.layout, self.gpus = mode, layout, gpus
        self.extra_env = extra_env or {}


def run_jobs(jobs):
    """Runs the jobs at once; each job's rank rows (a rank that reported nothing is
    missing, and the job's errors go to stderr)."""
    with tempfile.TemporaryDirectory() as scratch:
        procs = []
        for i, job in enumerate(jobs):
            rows_dir = os.path.join(scratch, f"rows{i}")
            os.mkdir(rows_dir)
            env = dict(os.environ, **NO_MULTICAST, PYTHONUNBUFFERED="1",
                       MULTIGPU_ROWS=rows_dir, **job.extra_env)
            procs.append((subprocess.Popen(job.cmd, env=env, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.PIPE, text=True), rows_dir))
        out = []
        for job, (proc, rows_dir) in zip(jobs, procs):
            try:
                _, stderr = proc.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, stderr = proc.communicate()
            rows = []
            for name in sorted(os.listdir(rows_dir)):
                with open(os.path.join(rows_dir, name)) as f:
                    rows.append(dict(json.load(f), mode=job.mode))
            if proc.returncode != 0 or len(rows) != job.gpus:
                report_failure(job, proc.returncode, rows, stderr)
            out.append(rows)
    return out


def report_failure(job, returncode, rows, stderr):
    # torchrun's summary hides the ranks' exceptions: those lines first.
    errors = [l for l in stderr.splitlines() if "Error" in l and "error_file" not in l]
    tail = "\n".join(list(dict.fromkeys(errors))[:8] + stderr.splitlines()[-15:])
    print(f"{job.layout} {job.mode}: exit {returncode}, {len(rows)} ranks reported\n{tail}",
          file=sys.stderr, flush=True)


def launch_job(job):
    """One job alone: its rank rows."""
    return run_jobs([job])[0]


def launch_in_turns(native, gpumem, turn_steps):
    """The two jobs at once on the same GPUs, taking turns `turn_steps` steps at a time
    (native first): (native rows, gpumem rows)."""
    with tempfile.TemporaryDirectory() as fifos:
        for job, role in ((native, "baseline"), (gpumem, "candidate")):
            job.extra_env = dict(job.extra_env, MULTIGPU_TURNS=f"{fifos},{role},{turn_steps}")
        return tuple(run_jobs([native, gpumem]))


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


def turn_blocks(native, gpumem):
    """Runs that took turns: the indices into step_times of each block both ran, each
    block's first step left out (it follows the other job's block, on a device the other
    job just used). Blocks after either ran alone are out."""
    n, warmup = native["turn_steps"], native.get("warmup", 0)
    end = warmup + min(len(native["step_times"]), len(gpumem["step_times"]))
    for r in (native, gpumem):
        if r.get("alone_from_step") is not None:
            end = min(end, r["alone_from_step"])
    return [range(start + 1 - warmup, start + n - warmup)
            for start in range(math.ceil(warmup / n) * n, end - n + 1, n)]


def turn_block_ratios(native, gpumem, of=sum):
    """Per block, gpumem's time over native's for the same steps (the same batches):
    `of` their times (sum: the block's time; statistics.median: its typical step)."""
    return [of([gpumem["step_times"][i] for i in steps])
            / of([native["step_times"][i] for i in steps])
            for steps in turn_blocks(native, gpumem)]


def rank0_pairs(rounds):
    for native, gpumem in rounds:
        n = next((r for r in native if r["rank"] == 0), None)
        g = next((r for r in gpumem if r["rank"] == 0), None)
        if n and g and n["step_times"] and g["step_times"]:
            yield n, g


def rank0_rows_by_job(rounds, name="gpumem"):
    """[("native", its rank 0 rows), (name, its rank 0 rows)], one row a round."""
    pairs = list(rank0_pairs(rounds))
    return [("native", [n for n, _ in pairs]), (name, [g for _, g in pairs])]


def step_ratio(rounds, of=sum):
    """Rank 0's time, gpumem over native: paired by block where the runs took turns (`of`
    each block's step times), by round otherwise. (point, low, high, pairs, per-round
    ratios) or None."""
    ratios, per_round = [], []
    for n, g in rank0_pairs(rounds):
        per_round.append(run_time_ratio(n["step_times"], g["step_times"]))
        ratios += turn_block_ratios(n, g, of) if "turn_steps" in n else [per_round[-1]]
    if len(ratios) < 2:
        return None
    return (*paired_interval(ratios), len(ratios), per_round)


def device_calls(rounds, name="gpumem"):
    """What gpumem's runs asked of the device per step, each rank of each round: the
    spread of stitches, page maps, stream waits and host synchronizes."""
    per = {"stitches": [], "borrows": [], "maps": [], "unmaps": [], "stream waits": [],
           "synchronizes": [], "ms in driver calls": []}
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
            per["ms in driver calls"].append(counters.get("host_call_ns", 0) / steps / 1e6)
    if not per["maps"]:
        return ""
    pages = sorted({r.get("page_bytes") or 0 for _, gpumem in rounds for r in gpumem})
    lines = [f"- {name}'s device calls per step (every rank and round, whole run; pages of "
             + "/".join(f"{p >> 20} MiB" for p in pages) + "): " + spreads(per)]
    timed = timed_device_calls(rounds)
    if timed:
        lines.append(f"- {name}'s device calls per timed step (after the warm-up): " + timed)
    return "\n".join(lines)


def timed_device_calls(rounds):
    """The same for the timed steps alone: the warm-up creates every page once."""
    per = {"maps": [], "unmaps": [], "page creates": [], "stream waits": [],
           "ms in driver calls": [], "ms in gpumem's thread": []}
    keys = {"maps": "maps", "unmaps": "unmaps", "page creates": "physical_creates",
            "stream waits": "stream_waits", "ms in driver calls": "host_call_ns",
            "ms in gpumem's thread": "background_call_ns"}
    for _, gpumem in rounds:
        for r in gpumem:
            if "timed_counters" not in r or not r.get("step_times"):
                continue
            steps = len(r["step_times"])
            for k, counter in keys.items():
                value = r["timed_counters"].get(counter, 0) / steps
                per[k].append(value / 1e6 if k.startswith("ms") else value)
    return spreads(per) if per["maps"] else ""


def spreads(per):
    digits = {"ms in driver calls": 2, "ms in gpumem's thread": 2}  # counts need one
    return "; ".join(f"{k} {min(v):.{digits.get(k, 1)}f}-{max(v):.{digits.get(k, 1)}f}"
                     for k, v in per.items())


def step_line(name, rounds):
    """Step time of `name` over native, paired by round (or by block where the runs took
    turns), with its goal; where they took turns, each block's median step too (the
    typical step, which the long steps of steadiness_line leave out); None without pairs."""
    r = step_ratio(rounds)
    if not r:
        return None
    point, low, high, pairs, per_round = r
    unit = "rounds" if pairs == len(per_round) else f"blocks of turns in {len(rounds)} rounds"
    each = ", ".join(f"{x:.3f}" for x in per_round)
    line = (f"- time of the timed steps {name}/native over {pairs} {unit}: {point:.3f} "
            f"[{low:.3f}, {high:.3f}]; within 1%: {goal_word(low, high, 1)}; "
            f"each round: {each}")
    if pairs == len(per_round):
        return line
    point, low, high, _, _ = step_ratio(rounds, statistics.median)
    return (line + f"\n- median step of each block {name}/native: {point:.3f} "
            f"[{low:.3f}, {high:.3f}]; within 1%: {goal_word(low, high, 1)}")


LONG_STEP = 1.2  # a step this many times its run's median step is a long one


def long_steps(times):
    median = statistics.median(times)
    return [t > LONG_STEP * median for t in times]


def steadiness_line(rounds, name="gpumem"):
    """Rank 0's step times of every round, native against `name`: the 50th, 90th, 95th and
    99th percentiles, and how many steps were long ones; None without times."""
    parts = []
    for who, rows in rank0_rows_by_job(rounds, name):
        times = sorted(t for r in rows for t in r["step_times"])
        if len(times) < 2:
            return None
        cuts = statistics.quantiles(times, n=100, method="inclusive")
        long = sum(sum(long_steps(r["step_times"])) for r in rows)
        parts.append(f"{who} " + "/".join(f"{cuts[q - 1] * 1e3:.0f}" for q in (50, 90, 95, 99))
                     + f" ms, {long} of {len(times)} steps over {LONG_STEP:g}x the median")
    return "- steadiness, rank 0, percentiles 50/90/95/99: " + "; ".join(parts)


MAP_PARTS = ("with maps", "without")


def step_parts(native, gpumem, names, part_of):
    """One pair's steps of its turn blocks, each in the part `part_of(i)` names (one of
    `names`): per part, (gpumem/native of the step, native's long, gpumem's long) for each
    step, in the order of `names`."""
    parts = {name: [] for name in names}
    native_long, gpumem_long = long_steps(native["step_times"]), long_steps(gpumem["step_times"])
    for steps in turn_blocks(native, gpumem):
        for i in steps:
            parts[part_of(i)].append((gpumem["step_times"][i] / native["step_times"][i],
                                      native_long[i], gpumem_long[i]))
    return parts


def pool_parts(names, each):
    """The parts of every split in `each` (as step_parts gives them), each part's steps
    put together."""
    parts = {name: [] for name in names}
    for split in each:
        for name, steps in split.items():
            parts[name] += steps
    return parts


def map_step_parts(native, gpumem):
    """One pair's steps of its turn blocks, split by whether gpumem mapped pages in them
    (step_maps), as step_parts. Empty parts without step_maps or turns."""
    maps = gpumem.get("step_maps")
    if not maps or "turn_steps" not in native:
        return {part: [] for part in MAP_PARTS}
    return step_parts(native, gpumem, MAP_PARTS,
                      lambda i: MAP_PARTS[0] if maps[i] > 0 else MAP_PARTS[1])


def pooled_map_step_parts(pairs):
    """map_step_parts of every (native, gpumem) pair, each part's steps put together."""
    return pool_parts(MAP_PARTS, (map_step_parts(native, gpumem) for native, gpumem in pairs))


def map_parts_text(parts, name="gpumem"):
    """'with maps N steps, name/native r [lo, hi], long steps a (name) / b (native); ...'
    for the parts of map_step_parts (or rank_map_step_parts) pooled, in their order; None
    when no part has two steps."""
    texts = []
    for part, steps in parts.items():
        if len(steps) < 2:
            continue
        point, low, high = paired_interval([r for r, _, _ in steps])
        texts.append(f"{part} {len(steps)} steps, {name}/native {point:.3f} [{low:.3f}, "
                     f"{high:.3f}], long steps {sum(g for _, _, g in steps)} ({name}) / "
                     f"{sum(n for _, n, _ in steps)} (native)")
    return "; ".join(texts) if texts else None


def map_steps_line(rounds, name="gpumem"):
    """Where mapping pages costs time: rank 0's steps split by whether `name` mapped pages
    in them, each step against native's same step (the same batch), with the long steps
    in each part; None without step_maps or turns."""
    text = map_parts_text(pooled_map_step_parts(rank0_pairs(rounds)), name)
    return f"- steps by whether {name} mapped pages, rank 0: {text}" if text else None


RANK_MAP_PARTS = ("no rank mapped", "rank 0 mapped", "only other ranks mapped")


def rank_map_step_parts(native_rows, gpumem_rows):
    """Rank 0's steps of its turn blocks, split by which of gpumem's ranks mapped pages in
    them: a collective waits for the slowest rank, so one rank's maps hold up every
    rank's step. As step_parts. Empty parts with one rank, or without step_maps or turns."""
    native = next((r for r in native_rows if r["rank"] == 0), None)
    gpumem = next((r for r in gpumem_rows if r["rank"] == 0), None)
    others = [r.get("step_maps") for r in gpumem_rows if r["rank"] != 0]
    if not (native and gpumem and gpumem.get("step_maps") and others and all(others)
            and "turn_steps" in native):
        return {part: [] for part in RANK_MAP_PARTS}

    def part_of(i):
        if gpumem["step_maps"][i] > 0:
            return RANK_MAP_PARTS[1]
        if any(i < len(maps) and maps[i] > 0 for maps in others):
            return RANK_MAP_PARTS[2]
        return RANK_MAP_PARTS[0]
    return step_parts(native, gpumem, RANK_MAP_PARTS, part_of)


def rank_map_steps_line(rounds, name="gpumem"):
    """rank_map_step_parts of every round pooled, as a line; None where it has no parts."""
    text = map_parts_text(pool_parts(RANK_MAP_PARTS, (rank_map_step_parts(native, gpumem)
                                                      for native, gpumem in rounds)), name)
    return f"- rank 0's steps by which ranks {name} mapped pages in: {text}" if text else None


def long_step_calls_line(rounds, name="gpumem"):
    """What `name`'s long steps asked of the driver against its other steps, rank 0: the
    mean per step of each device call and of the host time in them (step_calls), and the
    share of steps that unmapped; None without step_calls."""
    long, other = [], []
    for r in (g for _, g in rank0_pairs(rounds)):
        calls = r.get("step_calls")
        if not calls:
            continue
        for i, is_long in enumerate(long_steps(r["step_times"])):
            (long if is_long else other).append({k: v[i] for k, v in calls.items()})
    if not long or not other:
        return None

    def describe(steps):
        def mean(k):
            return statistics.fmean(s.get(k, 0) for s in steps)
        unmapping = sum(s.get("unmaps", 0) > 0 for s in steps) / len(steps)
        return (f"maps {mean('maps'):.1f}, unmaps {mean('unmaps'):.1f} ({unmapping:.0%} of "
                f"steps), stream waits {mean('stream_waits'):.1f}, synchronizes "
                f"{mean('synchronizes'):.2f}, host in calls {mean('host_call_ns') / 1e6:.2f} ms, "
                f"background {mean('background_call_ns') / 1e6:.2f} ms")
    return (f"- {name}'s device calls a step, rank 0: {len(long)} long steps {describe(long)}; "
            f"{len(other)} others {describe(other)}")


def phase_line(rounds):
    """Where the long steps' time went, rank 0, each job: the mean device and host ms of
    each phase (multi_gpu_train.py --phases) in its long steps over its other steps;
    None without phases."""
    parts = []
    for who, rows in rank0_rows_by_job(rounds):
        long, other = [], []
        for r in rows:
            if not r.get("phases"):
                return None
            for is_long, p in zip(long_steps(r["step_times"]), r["phases"]):
                (long if is_long else other).append(p)
        if not long or not other:
            continue

        def mean(steps, side, name):
            return statistics.fmean(p[side].get(name, 0.0) for p in steps)
        excess = ", ".join(
            f"{name} {mean(long, 'device', name) - mean(other, 'device', name):+.1f}/"
            f"{mean(long, 'host', name) - mean(other, 'host', name):+.1f}"
            for name in long[0]["device"])
        parts.append(f"{who} ({len(long)} long) {excess}")
    if not parts:
        return None
    return ("- long steps over the others by phase, rank 0, device/host ms: "
            + "; ".join(parts))


def gc_line(rounds):
    """Rank 0's Python collections in the timed steps, native against gpumem: ms a step,
    full collections, and steps stalled over 10 ms by one (None: rows without gc_ms)."""
    parts = []
    for name, rows in rank0_rows_by_job(rounds):
        ms = [x for r in rows for x in r.get("gc_ms") or []]
        if not ms:
            return None
        full = sum((r.get("gc_collections") or [0, 0, 0])[2] for r in rows)
        stalled = sum(x > 10 for x in ms)
        parts.append(f"{name} {sum(ms) / len(ms):.2f} ms a step, {full} full, "
                     f"{stalled} steps over 10 ms")
    return "- Python's collections in the timed steps, rank 0: " + "; ".join(parts)


def gib(used):
    """The driver's in-use figure; None where two jobs shared the GPUs (turns)."""
    return "shared by both jobs" if used is None else f"{used / 2**30:.2f} GiB"


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
                     f"in use {gib(driver)} (native {gib(n['driver_used'] if n else 0)})")
        good = good and right and ratio <= 1.02
    lines += [line for line in (step_line("gpumem", rounds), steadiness_line(rounds),
                                map_steps_line(rounds), rank_map_steps_line(rounds),
                                long_step_calls_line(rounds),
                                phase_line(rounds), gc_line(rounds),
                                device_calls(rounds)) if line]
    return "\n".join(lines) + "\n", ok and good


def parse_variant(text):
    """'nostitch:GPUMEM_STITCH=0,GPUMEM_THREAD_CACHE=0' -> ('nostitch', {...})."""
    name, _, assignments = text.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if "=" in a)
    if not name or not env:
        raise SystemExit(f"--variant {text!r}: expected NAME:VAR=VALUE[,VAR=VALUE]")
    return name, env


def summarize_variant(name, pairs):
    """A variant's figures and step time against its native run, round by round: pairs of
    (native rows, variant rows)."""
    lines = []
    for rank, right, ratio, driver in rank_figures(pairs[0][1] if pairs else []):
        lines.append(f"- {name}, rank {rank}: figures right {'yes' if right else 'NO'}; peak "
                     f"reserved/allocated {ratio:.3f}; driver in use {gib(driver)}")
    lines += [line for line in (step_line(name, pairs), device_calls(pairs, name)) if line]
    return "\n".join(lines) + "\n" if lines else ""


def run_round(args, layout, gpus, index, variants):
    """One round: (native rows, gpumem rows) and each variant's (native rows, its rows).
    Taking turns, every gpumem job has a native job of its own beside it; otherwise the
    jobs run one after the other and the variants share the round's native run."""
    port = 29500 + 8 * index
    train_args = shlex.split(args.train_args)

    def job(mode, j, env=None):
        return Job(args.cli, mode, layout, gpus, args.steps, port + j, train_args, env)

    def tagged(rows, name):
        return [dict(r, mode=name) for r in rows]

    if args.turns:
        pair = launch_in_turns(job("native", 0), job("gpumem", 1), args.turns)
        others = {name: launch_in_turns(job("native", 2 + 2 * k), job("gpumem", 3 + 2 * k, env),
                                        args.turns)
                  for k, (name, env) in enumerate(variants)}
    else:
        pair = (launch_job(job("native", 0)), launch_job(job("gpumem", 1)))
        others = {name: (pair[0], launch_job(job("gpumem", 2 + k, env)))
                  for k, (name, env) in enumerate(variants)}
    return pair, {name: (native, tagged(rows, name)) for name, (native, rows) in others.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cli")
    ap.add_argument("--layouts", default="ddp,fsdp2,fsdp2-keep,tp")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--turns", type=int, default=0, metavar="N",
                    help="native and gpumem at once, taking turns N steps at a time")
    ap.add_argument("--train-args", default="",
                    help="more arguments for multi_gpu_train.py, e.g. \"--dim 2048 --layers 12\"")
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
        rounds, variant_pairs = [], {name: [] for name, _ in variants}
        for i in range(args.rounds):
            pair, others = run_round(args, layout, gpus, i, variants)
            rounds.append(pair)
            # Each native row names the job it took turns with (pool_turns.py pairs by it).
            runs = [dict(r, against="gpumem") for r in pair[0]] + pair[1]
            for name, (native, rows) in others.items():
                variant_pairs[name].append((native, rows))
                runs += rows + ([dict(r, against=name) for r in native] if args.turns else [])
            for row in runs:
                print(json.dumps(dict(row, round=i)), file=out or sys.stderr, flush=True)
        text, ok = summarize(layout, rounds)
        for name, _ in variants:
            text += summarize_variant(name, variant_pairs[name])
        print(text, flush=True)
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
