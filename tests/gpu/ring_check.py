"""A bounded trace (GPUMEM_TRACE_MAX) on a real training run: `gpumem run` with a 16M ring
(the least allowed) over a script that trains a small model fast for a while, keeping a
little of every step (the slow leak, from the first step on), then keeps much more every
step (the fast leak) until the cap stops it. While it runs, the ring's files on disk are
measured every 0.2 s. Then `gpumem report` on the ring.

Right when: the run died of the OOM; the ring rotated (the report says what it dropped);
the files never took more than the stated bound (docs/profiler.md, Bounded traces: SIZE +
SIZE/64 + 8 x 16 KiB a recording thread, 4 threads allowed; the CUPTI tracer's companion
ring within the same for its share, max(SIZE/16, 16M)); the report names both leak sites
at their lines, the slow leak's early blocks living only in the checkpoint of the oldest
kept segment. Prints one JSON line; exits 1 when a check fails.

usage: ring_check.py GPUMEM_CLI [--seconds S] [--cap BYTES]
       ring_check.py train --seconds S   (what the ring records)
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

RING = 16 << 20
THREADS = 4
BOUND = RING + RING // 64 + 8 * (16 << 10) * THREADS


def train(seconds):
    import torch
    net = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)]).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    kept = []
    start = time.monotonic()
    fast = False
    while True:
        loss = net(torch.randn(64, 256, device="cuda")).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if not fast:
            kept.append(torch.empty(16 << 10, dtype=torch.uint8, device="cuda"))  # SLOW LEAK
            fast = time.monotonic() - start > seconds
        else:
            kept.append(torch.empty(32 << 20, dtype=torch.uint8, device="cuda"))  # FAST LEAK


def line_of(marker):
    with open(os.path.abspath(__file__)) as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith("# " + marker) and "def line_of" not in line:
                return n
    raise SystemExit(f"no line marked {marker}")


def disk_bytes(pattern):
    """Bytes the files take: for each, the larger of its length and its blocks."""
    total = 0
    for p in glob.glob(pattern):
        try:
            st = os.stat(p)
        except FileNotFoundError:  # deleted by the ring between glob and stat
            continue
        total += max(st.st_size, st.st_blocks * 512)
    return total


def watch(stem, stop, seen):
    while not stop.is_set():
        seen["max"] = max(seen["max"], disk_bytes(stem + ".seg*.gpumem"))
        # The CUPTI tracer's companion (raw driver calls), beside the ring.
        seen["cupti_max"] = max(seen["cupti_max"], disk_bytes(stem + ".cupti*.gpumem"))
        seen["names"].update(os.path.basename(p) for p in glob.glob(stem + ".seg*.gpumem"))
        time.sleep(0.2)


def check(cli, seconds, cap):
    work = tempfile.mkdtemp()
    trace = os.path.join(work, "run.gpumem")
    stem = trace[:-len(".gpumem")]
    env = dict(os.environ, GPUMEM_TRACE=trace, GPUMEM_TRACE_MAX=str(RING),
               GPUMEM_STACKS="python", GPUMEM_CAPACITY=str(cap), PYTHONUNBUFFERED="1")
    stop, seen = threading.Event(), {"max": 0, "cupti_max": 0, "names": set()}
    watcher = threading.Thread(target=watch, args=(stem, stop, seen))
    watcher.start()
    t0 = time.monotonic()
    p = subprocess.run([cli, "run", "--", sys.executable, os.path.abspath(__file__), "train",
                        "--seconds", str(seconds)], env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    stop.set()
    watcher.join()
    r = subprocess.run([cli, "report", "--json", trace], capture_output=True, text=True)
    report = json.loads(r.stdout) if r.returncode == 0 else {}
    me = os.path.basename(__file__)
    row = {
        "seconds": round(wall, 1),
        "died_of_oom": "OutOfMemoryError" in p.stderr,
        "ring_bytes": RING, "bound_bytes": BOUND, "max_on_disk_bytes": seen["max"],
        "cupti_max_on_disk_bytes": seen["cupti_max"],
        "segments_seen": len(seen["names"]),
        "segments_left": len(glob.glob(stem + ".seg*.gpumem")),
        "report_ok": r.returncode == 0,
        "ring_note": report.get("ring", ""),
        "verdict": report.get("verdict", r.stderr.strip()[:200]),
        "slow_leak_named": f"{me}:{line_of('SLOW LEAK')}" in r.stdout,
        "fast_leak_named": f"{me}:{line_of('FAST LEAK')}" in r.stdout,
        "stderr_tail": p.stderr.splitlines()[-6:],
    }
    dropped = isinstance(row["ring_note"], dict) and row["ring_note"].get("dropped")
    row["ok"] = bool(row["died_of_oom"] and dropped and row["report_ok"]
                     and row["max_on_disk_bytes"] <= BOUND
                     and row["cupti_max_on_disk_bytes"] <= BOUND
                     and "leak" in row["verdict"].split(";")[0]
                     and row["slow_leak_named"] and row["fast_leak_named"])
    return row


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "train":
        ap = argparse.ArgumentParser()
        ap.add_argument("what")
        ap.add_argument("--seconds", type=float, default=60)
        train(ap.parse_args().seconds)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cli")
    ap.add_argument("--seconds", type=float, default=60, help="time before the fast leak")
    ap.add_argument("--cap", type=int, default=4 << 30, help="GPUMEM_CAPACITY of the run")
    args = ap.parse_args()
    row = check(args.cli, args.seconds, args.cap)
    print(json.dumps(row))
    sys.exit(0 if row["ok"] else 1)


if __name__ == "__main__":
    main()
