"""The allocator under a long, hostile load on a GPU (run under `gpumem run`).

soak: threads on several streams allocate random sizes, fill each block with a value of
its own by a kernel on its stream, sometimes hand it to another stream (record_stream)
and fill a part there, and check every byte before freeing it (also after an OOM);
meanwhile the cap moves, a third of the time to just above what is live, and
empty_cache runs at random. Prints one JSON line: operations, corruptions (must be
0), OOMs survived, reserved / allocated at the end. Exit 1 on any corruption or error
that is not an OOM.

pair: two processes share the GPU, each under its own GPUMEM_CAPACITY; `hog` runs into
its cap again and again, `steady` repeats one step's allocations and checks that every
step sees the same figures and never fails. Run both at once (tests/gpu/run.sh soak).

usage: soak.py soak [--seconds 600] [--threads 8] [--streams 4] [--seed 0]
       soak.py hog|steady [--seconds 120]
"""
import argparse
import json
import random
import sys
import threading
import time

import torch

import gpumem

MIB = 1 << 20


class Totals:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"allocations": 0, "handoffs": 0, "checks": 0, "corruptions": 0,
                       "ooms": 0, "cap_changes": 0, "empty_caches": 0, "errors": []}

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] += n


def random_size(rng):
    """Mostly small blocks, some large: the sizes a training step makes."""
    if rng.random() < 0.7:
        return rng.randint(1, 1 << 16)
    return rng.randint(1 << 16, 256 * MIB)


def fill(block, value, stream):
    with torch.cuda.stream(stream):
        block.fill_(value)


def intact(block, value, stream, patience_s=30):
    """Whether every byte of `block` still holds `value`; the block is spent (it is freed
    after its check). The comparison runs in place, so the check itself asks only for the
    one-byte answer; under a cap just above what is live even that may fail, and since a
    check is not one of the allocations under test it waits for memory and asks again."""
    deadline = time.time() + patience_s
    with torch.cuda.stream(stream):
        block.eq_(value)
        while True:
            try:
                return bool(block.all().item())
            except torch.OutOfMemoryError:
                if time.time() > deadline:
                    raise RuntimeError(f"a check found no memory for {patience_s} s") from None
                time.sleep(0.01)


def worker(index, args, streams, totals, stop):
    """One thread's loop; anything but an OOM that escapes it is a failure, recorded."""
    try:
        work(index, args, streams, totals, stop)
    except Exception as e:
        with totals.lock:
            totals.counts["errors"].append(repr(e)[:200])
        stop.set()


def work(index, args, streams, totals, stop):
    rng = random.Random(args.seed * 1000 + index)
    live = []  # (block, value, stream)
    while not stop.is_set():
        try:
            if live and (len(live) > 16 or rng.random() < 0.45):
                block, value, stream = live.pop(rng.randrange(len(live)))
                totals.add("checks")
                if not intact(block, value, stream):
                    totals.add("corruptions")
                del block
                continue
            stream = rng.choice(streams)
            with torch.cuda.stream(stream):
                block = torch.empty(random_size(rng), dtype=torch.uint8, device="cuda")
            value = rng.randrange(256)
            fill(block, value, stream)
            totals.add("allocations")
            if rng.random() < 0.2:  # another stream writes it next: its free must wait
                other = rng.choice(streams)
                other.wait_stream(stream)
                block.record_stream(other)
                value = (value + 1) % 256
                fill(block, value, other)
                stream = other
                totals.add("handoffs")
            live.append((block, value, stream))
        except torch.OutOfMemoryError:
            totals.add("ooms")
            check_all(live, totals)  # what was live through the OOM is still intact
    check_all(live, totals)


def check_all(live, totals):
    """Checks and frees every block in `live`."""
    for block, value, stream in live:
        totals.add("checks")
        if not intact(block, value, stream):
            totals.add("corruptions")
    live.clear()


def next_cap(rng, total):
    """Mostly anywhere from half to all of the device; a third of the time just above what
    is live, so that the threads run into it together and survive their OOMs."""
    if rng.random() < 2 / 3:
        return int(total * rng.uniform(0.5, 1.0))
    return gpumem.stats()["allocated_bytes"] + int(rng.uniform(64 * MIB, 2048 * MIB))


def chaos(args, totals, stop):
    """The cap moves (next_cap); empty_cache now and then."""
    rng = random.Random(args.seed)
    total = torch.cuda.mem_get_info()[1]
    while not stop.wait(rng.uniform(0.05, 0.5)):
        if rng.random() < 0.5:
            try:  # a cap below what is live is the allocator's to refuse, clearly
                gpumem.set_capacity(next_cap(rng, total))
                totals.add("cap_changes")
            except (ValueError, RuntimeError) as e:
                with totals.lock:
                    totals.counts.setdefault("refused_caps", []).append(str(e)[:120])
        else:
            torch.cuda.empty_cache()
            totals.add("empty_caches")
    gpumem.set_capacity(total)


def soak(args):
    if not gpumem.installed():
        sys.exit("soak.py: run it under `gpumem run` (gpumem is not the allocator here)")
    torch.cuda.init()
    streams = [torch.cuda.Stream() for _ in range(args.streams)]
    totals, stop = Totals(), threading.Event()
    threads = [threading.Thread(target=worker, args=(i, args, streams, totals, stop))
               for i in range(args.threads)]
    threads.append(threading.Thread(target=chaos, args=(args, totals, stop)))
    start = time.time()
    for t in threads:
        t.start()
    while time.time() - start < args.seconds and not stop.is_set():
        time.sleep(1)
    stop.set()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    stats = gpumem.stats()
    device = gpumem.snapshot()["devices"][0]  # blocks moved between the streams' heaps
    row = dict(totals.counts, seconds=round(time.time() - start, 1),
               reserved=stats["reserved_bytes"], allocated=stats["allocated_bytes"],
               oom_count=stats["oom_count"],
               **{k: device.get(k, 0) for k in ("cross_stream_borrows", "cross_stream_lends")})
    print(json.dumps(row), flush=True)
    return 1 if row["corruptions"] or row["errors"] else 0


def hog(args):
    """Runs into its cap over and over; it must only ever see OOMs."""
    ooms, blocks, start = 0, [], time.time()
    while time.time() - start < args.seconds:
        try:
            blocks.append(torch.empty(64 * MIB, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            ooms += 1
            blocks.clear()
    print(json.dumps({"role": "hog", "ooms": ooms}), flush=True)
    return 0 if ooms > 0 else 1


def steady(args):
    """The same step again and again: the figures at each step's end must not move."""
    rng = random.Random(args.seed)
    sizes = [random_size(rng) for _ in range(64)]
    seen, failures, steps, start = set(), 0, 0, time.time()
    while time.time() - start < args.seconds:
        try:
            blocks = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in sizes]
            for i, b in enumerate(blocks):
                b.fill_(i % 256)
            del blocks
        except torch.OutOfMemoryError:
            failures += 1
        torch.cuda.synchronize()
        if steps >= 3:  # after the layout settled
            seen.add((torch.cuda.memory_allocated(), torch.cuda.memory_reserved()))
        steps += 1
    print(json.dumps({"role": "steady", "steps": steps, "failures": failures,
                      "distinct_figures": len(seen), "figures": sorted(seen)[:4]}), flush=True)
    return 0 if failures == 0 and len(seen) == 1 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["soak", "hog", "steady"])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    return {"soak": soak, "hog": hog, "steady": steady}[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
