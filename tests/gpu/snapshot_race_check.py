"""gpumem.snapshot() while other threads allocate, under `gpumem run`: its JSON must
always parse. Also reads the same text the way the package did before (one call to size
the buffer, one to fill it), to show the race that check guards against: the figures
can lengthen between the two calls and the second text is cut.

usage: gpumem run -- python3 snapshot_race_check.py [--seconds 10] [--threads 4]
Prints one JSON line; exits 1 when a snapshot read by the package failed to parse.
"""
import argparse
import ctypes
import json
import random
import sys
import threading
import time

import torch

import gpumem
from gpumem import _native


def allocate(stop, seed):
    rng = random.Random(seed)
    kept = []
    while not stop.is_set():
        kept.append(torch.empty(rng.randrange(1, 64 << 20), dtype=torch.uint8, device="cuda"))
        if len(kept) > 8:
            kept.pop(rng.randrange(len(kept)))


def two_call_text(fn, device):
    """The package's read before it asked again until the text fit."""
    need = fn(device, None, 0)
    buf = ctypes.create_string_buffer(need)
    fn(device, buf, need)
    return buf.value.decode("utf-8", "replace")


def parses(read):
    try:
        json.loads(read())
        return True
    except json.JSONDecodeError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    if not gpumem.installed():
        print(json.dumps({"skipped": "gpumem is not PyTorch's allocator (run under gpumem run)"}))
        return 0
    stop = threading.Event()
    workers = [threading.Thread(target=allocate, args=(stop, k)) for k in range(args.threads)]
    for w in workers:
        w.start()
    fn = _native.lib().gpumem_snapshot_json
    reads = package_bad = two_call_bad = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        reads += 1
        package_bad += not parses(lambda: json.dumps(gpumem.snapshot(0)))
        two_call_bad += not parses(lambda: two_call_text(fn, 0))
    stop.set()
    for w in workers:
        w.join()
    print(json.dumps({"reads": reads, "package_unparsable": package_bad,
                      "two_call_unparsable": two_call_bad}))
    return 1 if package_bad else 0


if __name__ == "__main__":
    sys.exit(main())
