"""What the driver calls behind gpumem's growth, stitching and stream order cost on this
GPU, per call, with the device idle and with it busy: cuMemCreate, cuMemMap,
cuMemSetAccess, cuMemUnmap and cuMemRelease on 2 MiB pages and on 64 MiB handles,
cuEventRecord, cuEventQuery and cuStreamWaitEvent. Whether an unmap waits for queued
work (an implicit device wait) shows as a busy-device cost near the queued work's length.
Prints one JSON object: microseconds per call (median of the calls), and the busy work's
length.

usage: python3 vmm_call_costs.py [--pages 128] [--device 0]
"""
import argparse
import ctypes
import json
import statistics
import time

import torch

MiB = 1 << 20


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


class Driver:
    def __init__(self, device):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.prop = AllocationProp(type=1, location=Location(1, device))  # pinned, device
        self.access = AccessDesc(location=Location(1, device), flags=3)  # read-write

    def __call__(self, name, *args):
        r = getattr(self.lib, name)(*args)
        if r != 0:
            raise RuntimeError(f"{name} failed: CUresult {r}")

    def timed(self, name, *args):
        start = time.perf_counter()
        self(name, *args)
        return (time.perf_counter() - start) * 1e6

    def create(self, size):
        h = ctypes.c_ulonglong()
        us = self.timed("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(size),
                        ctypes.byref(self.prop), ctypes.c_ulonglong(0))
        return h.value, us

    def map(self, va, size, handle, offset=0):
        return self.timed("cuMemMap", ctypes.c_ulonglong(va), ctypes.c_size_t(size),
                          ctypes.c_size_t(offset), ctypes.c_ulonglong(handle),
                          ctypes.c_ulonglong(0))

    def set_access(self, va, size):
        return self.timed("cuMemSetAccess", ctypes.c_ulonglong(va), ctypes.c_size_t(size),
                          ctypes.byref(self.access), ctypes.c_size_t(1))

    def unmap(self, va, size):
        return self.timed("cuMemUnmap", ctypes.c_ulonglong(va), ctypes.c_size_t(size))

    def release(self, handle):
        return self.timed("cuMemRelease", ctypes.c_ulonglong(handle))


def busy(ms):
    """Queues about `ms` of matrix products on the current stream; returns the host time
    it takes to queue them (the rest runs after)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    a @ a  # cuBLAS's first call sets up
    torch.cuda.synchronize()
    start = time.perf_counter()
    a @ a
    torch.cuda.synchronize()
    one = (time.perf_counter() - start) * 1e3
    for _ in range(max(1, int(ms / max(one, 0.01)))):
        a = a @ a * 1e-4
    return a


def page_costs(d, base, pages, page, prefix):
    """Per-page create, map, one set-access for the run, unmap and release, in µs."""
    out = {}
    made = [d.create(page) for _ in range(pages)]
    out[f"{prefix}create"] = statistics.median(us for _, us in made)
    out[f"{prefix}map"] = statistics.median(
        d.map(base + i * page, page, h) for i, (h, _) in enumerate(made))
    out[f"{prefix}set_access_run"] = d.set_access(base, pages * page)
    out[f"{prefix}unmap"] = statistics.median(d.unmap(base + i * page, page)
                                              for i in range(pages))
    out[f"{prefix}release"] = statistics.median(d.release(h) for h, _ in made)
    return out


def run_unmap(d, base, pages, page):
    """One cuMemUnmap over a run of separately mapped pages: allowed, and its cost."""
    made = [d.create(page)[0] for _ in range(pages)]
    for i, h in enumerate(made):
        d.map(base + i * page, page, h)
    d.set_access(base, pages * page)
    try:
        us = d.unmap(base, pages * page)
    except RuntimeError as e:
        for i in range(pages):
            d.unmap(base + i * page, page)
        us = str(e)
    for h in made:
        d.release(h)
    return us


def device_stall(d, base, pages, page, rounds=6):
    """The device time that page moves cost queued work running beside them: ~200 ms of
    matrix products timed by events, alone and with `pages` pages moved (map at a new
    address, access, unmap the old) on the host while they run, alternating. Returns the
    median extra device milliseconds per move (in µs) and the moves' host time."""
    made = [d.create(page)[0] for _ in range(pages)]
    for i, h in enumerate(made):
        d.map(base + i * page, page, h)
    d.set_access(base, pages * page)
    other = base + pages * page  # the moves alternate between the two runs
    at = [base, other]
    extra, host_us = [], []
    for r in range(2 * rounds):
        moving = r % 2 == 1
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        keep = busy(200)
        end.record()
        if moving:
            src, dst = at[0], at[1]
            t0 = time.perf_counter()
            for i, h in enumerate(made):
                d.map(dst + i * page, page, h)
                d.set_access(dst + i * page, page)
                d.unmap(src + i * page, page)
            host_us.append((time.perf_counter() - t0) * 1e6 / pages)
            at.reverse()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end)
        extra.append((moving, ms))
        del keep
    alone = [ms for moving, ms in extra if not moving]
    moved = [ms for moving, ms in extra if moving]
    for i in range(pages):
        d.unmap(at[0] + i * page, page)
    for h in made:
        d.release(h)
    return {"stall_device_ms_alone": statistics.median(alone),
            "stall_device_ms_moving": statistics.median(moved),
            "stall_us_per_move": (statistics.median(moved) - statistics.median(alone)) * 1e3 / pages,
            "stall_host_us_per_move": statistics.median(host_us)}


def parallel_costs(d, base, pages, page, threads):
    """Whether the driver runs VMM calls from several threads at once: the wall time of
    mapping + granting access to `pages` pages (and of unmapping them), split among
    `threads` threads, in µs per page."""
    import threading
    made = [d.create(page)[0] for _ in range(pages)]
    chunk = pages // threads

    def in_threads(work):
        ts = [threading.Thread(target=work, args=(k * chunk, chunk)) for k in range(threads)]
        start = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return (time.perf_counter() - start) * 1e6 / (chunk * threads)

    def map_run(first, n):
        for i in range(first, first + n):
            d.map(base + i * page, page, made[i])
        d.set_access(base + first * page, n * page)

    def unmap_run(first, n):
        for i in range(first, first + n):
            d.unmap(base + i * page, page)

    out = {f"threads{threads}_map_access": in_threads(map_run),
           f"threads{threads}_unmap": in_threads(unmap_run)}
    for h in made:
        d.release(h)
    return out


def launch_interference(d, base, pages, page):
    """The host time of queuing small kernels on this thread, alone and while another
    thread moves pages: whether the driver's VMM calls hold up launches."""
    import threading
    x = torch.zeros(256, device="cuda")
    made = [d.create(page)[0] for _ in range(pages)]
    stop = threading.Event()

    def mover():
        while not stop.is_set():
            for i, h in enumerate(made):
                d.map(base + i * page, page, h)
                d.set_access(base + i * page, page)
            for i in range(pages):
                d.unmap(base + i * page, page)

    def launches():
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(3000):
            x.add_(1.0)
        t = (time.perf_counter() - start) * 1e6 / 3000
        torch.cuda.synchronize()
        return t

    alone = [launches() for _ in range(3)]
    t = threading.Thread(target=mover)
    t.start()
    time.sleep(0.01)
    beside = [launches() for _ in range(3)]
    stop.set()
    t.join()
    for h in made:
        d.release(h)
    return {"launch_us_alone": statistics.median(alone),
            "launch_us_beside_moves": statistics.median(beside)}


def move_costs(d, base, page, moves=64, crowd=2048):
    """What one page's map + access grant costs the way gpumem's stitching does it, in µs
    (median of `moves`), against a fresh page on an empty address space: with `crowd`
    other pages mapped in the process; for a page that stays mapped at another address
    (a lent page, its old address unmapped later); and beside another thread unmapping
    pages meanwhile (gpumem's unmapper)."""
    import threading

    def grant(va, handles):
        us = []
        for i, h in enumerate(handles):
            start = time.perf_counter()
            d.map(va + i * page, page, h)
            d.set_access(va + i * page, page)
            us.append((time.perf_counter() - start) * 1e6)
        return statistics.median(us)

    def unmap_all(va, n):
        for i in range(n):
            d.unmap(va + i * page, page)

    def grant_beside(work):
        stop = threading.Event()
        t = threading.Thread(target=work, args=(stop,))
        t.start()
        time.sleep(0.005)
        us = grant(base, moving)
        stop.set()
        t.join()
        return us

    def unmapper(stop):  # as gpumem's thread does: unmaps one page after another
        first = crowd // 2  # pages [first, crowd) of the crowd, as many as it gets to
        at = crowd_at + first * page
        n = 0
        while n < crowd - first and not stop.is_set():
            d.unmap(at + n * page, page)
            n += 1
        for i in range(n):  # mapped again, outside the timed part
            d.map(at + i * page, page, crowd_handles[first + i])
        if n:
            d.set_access(at, n * page)

    def poller(ev):  # as gpumem's thread waits for a job's work: a query every 100 us
        def poll(stop):
            while not stop.is_set():
                d.lib.cuEventQuery(ev)
                time.sleep(1e-4)
        return poll

    out = {}
    moving = [d.create(page)[0] for _ in range(moves)]
    out["move_fresh_empty"] = grant(base, moving)
    unmap_all(base, moves)
    crowd_at = base + moves * page
    crowd_handles = [d.create(page)[0] for _ in range(crowd)]
    for i, h in enumerate(crowd_handles):
        d.map(crowd_at + i * page, page, h)
    d.set_access(crowd_at, crowd * page)
    out["move_fresh_crowded"] = grant(base, moving)
    unmap_all(base, moves)
    out["move_alias_crowded"] = grant(base, crowd_handles[:moves])  # also mapped at crowd_at
    unmap_all(base, moves)
    out["move_fresh_beside_unmaps"] = grant_beside(unmapper)
    unmap_all(base, moves)
    keep = busy(100)  # work the polled event waits behind
    ev = ctypes.c_void_p()
    d("cuEventCreate", ctypes.byref(ev), ctypes.c_uint(2))
    d("cuEventRecord", ev, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    out["move_fresh_beside_queries"] = grant_beside(poller(ev))
    out["move_query_pending"] = d.lib.cuEventQuery(ev) != 0  # the event still waited
    torch.cuda.synchronize()
    d("cuEventDestroy_v2", ev)
    del keep
    unmap_all(base, moves)
    # Right after another thread's burst of unmaps, not during it: a cost they leave.
    t = threading.Thread(target=unmap_all, args=(crowd_at + (crowd - 2 * moves) * page, moves))
    t.start()
    t.join()
    out["move_fresh_after_unmaps"] = grant(base, moving)
    for i, h in enumerate(crowd_handles[crowd - 2 * moves:crowd - moves]):  # mapped again
        d.map(crowd_at + (crowd - 2 * moves + i) * page, page, h)
    d.set_access(crowd_at + (crowd - 2 * moves) * page, moves * page)
    unmap_all(base, moves)
    unmap_all(crowd_at, crowd)
    for h in moving + crowd_handles:
        d.release(h)
    out["move_page_mib"] = page // MiB
    return out


def slot_costs(d, base, page, k=8, reps=24):
    """What mapping a run of `k` pages at consecutive addresses costs (its maps and one
    access grant over the run), in µs per run (median of `reps`), and unmapping it again,
    by where the pages come from: `k` handles of a page each (gpumem today); one handle
    of `k` pages mapped a page at a time from its offsets, in order and shuffled; slots of
    two such handles taken in turn; one handle mapped whole. Whether an access grant
    costs per mapping or per handle decides whether larger handles would save grants."""
    import random

    order = list(range(k))
    shuffled = order[:]
    random.Random(1).shuffle(shuffled)
    pages = [d.create(page)[0] for _ in range(k)]
    big = [d.create(k * page)[0] for _ in range(2)]
    layouts = {  # name -> [(handle, offset) for each page of the run]
        "separate": [(h, 0) for h in pages],
        "slots": [(big[0], i * page) for i in order],
        "slots_shuffled": [(big[0], i * page) for i in shuffled],
        "slots_two_handles": [(big[i % 2], (i // 2) * page) for i in order],
    }
    out = {}

    def run(maps):  # maps: [(va offset, size, handle, handle offset)]
        start = time.perf_counter()
        for at, size, h, off in maps:
            d.map(base + at, size, h, off)
        d.set_access(base, k * page)
        mapped = time.perf_counter()
        for at, size, _, _ in maps:
            d.unmap(base + at, size)
        return (mapped - start) * 1e6, (time.perf_counter() - mapped) * 1e6

    cases = {name: [(i * page, page, h, off) for i, (h, off) in enumerate(slots)]
             for name, slots in layouts.items()}
    cases["whole"] = [(0, k * page, big[0], 0)]
    for name, maps in cases.items():
        try:
            runs = [run(maps) for _ in range(reps)]
        except RuntimeError as e:  # a driver that maps no handle from an offset
            out[f"slot_{name}_error"] = str(e)
            for at, size, _, _ in maps:
                d.lib.cuMemUnmap(ctypes.c_ulonglong(base + at), ctypes.c_size_t(size))
            continue
        out[f"slot_{name}_map_run"] = statistics.median(m for m, _ in runs)
        out[f"slot_{name}_unmap_run"] = statistics.median(u for _, u in runs)
    for h in pages + big:
        d.release(h)
    out["slot_pages_per_run"] = k
    out["slot_page_mib"] = page // MiB
    return out


def exportable_costs(d, base, pages=64, page=8 * MiB, rounds=8):
    """What asking for pages that can be shared with another process (a POSIX file
    descriptor handle type, as gpumem's pages are made) costs each call against plain
    pages: rounds of `pages` 8 MiB pages of each kind taken in turn, per-call medians in µs
    for each kind, and each call's ratio with the range of the rounds' ratios."""
    costs = {False: [], True: []}
    for r in range(2 * rounds):
        exportable = r % 2 == 1
        d.prop.requestedHandleTypes = 1 if exportable else 0
        costs[exportable].append(page_costs(d, base, pages, page, ""))
    d.prop.requestedHandleTypes = 0
    out = {}
    for call in costs[False][0]:
        plain = [c[call] for c in costs[False]]
        shared = [c[call] for c in costs[True]]
        ratios = [s / p for s, p in zip(shared, plain)]
        out[f"export_{call}_plain"] = statistics.median(plain)
        out[f"export_{call}_exportable"] = statistics.median(shared)
        out[f"export_{call}_ratio"] = statistics.median(ratios)
        out[f"export_{call}_ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    return out


def event_costs(d, stream):
    ev = ctypes.c_void_p()
    d("cuEventCreate", ctypes.byref(ev), ctypes.c_uint(2))  # disable timing
    rec = [d.timed("cuEventRecord", ev, stream) for _ in range(200)]
    query = []
    for _ in range(200):
        start = time.perf_counter()
        d.lib.cuEventQuery(ev)
        query.append((time.perf_counter() - start) * 1e6)
    wait = [d.timed("cuStreamWaitEvent", stream, ev, ctypes.c_uint(0)) for _ in range(200)]
    d("cuEventDestroy_v2", ev)
    return {"event_record": statistics.median(rec), "event_query": statistics.median(query),
            "stream_wait_event": statistics.median(wait)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=128)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--moves-only", action="store_true",
                    help="only the cost of moving an 8 MiB page, crowded, lent, beside unmaps")
    ap.add_argument("--slots-only", action="store_true",
                    help="only what a run of 8 MiB pages costs mapped from one handle each "
                         "or from slots of larger handles")
    ap.add_argument("--exportable-only", action="store_true",
                    help="only what exportable 8 MiB pages cost against plain ones")
    args = ap.parse_args()
    torch.cuda.set_device(args.device)
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    d = Driver(args.device)
    page, chunk = 2 * MiB, 64 * MiB
    va = ctypes.c_ulonglong()
    d("cuMemAddressReserve", ctypes.byref(va), ctypes.c_size_t(8 << 30), ctypes.c_size_t(0),
      ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
    base = va.value
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    out = {"gpu": torch.cuda.get_device_name(), "pages": args.pages}
    if args.moves_only:  # as many mappings as FSDP2's 16 GB in 8 MiB pages: 2048
        d("cuMemAddressFree", ctypes.c_ulonglong(base), ctypes.c_size_t(8 << 30))
        d("cuMemAddressReserve", ctypes.byref(va), ctypes.c_size_t(24 << 30),
          ctypes.c_size_t(0), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
        for page_mib in (2, 8):
            out.update({f"{k}_{page_mib}m": v for k, v in
                        move_costs(d, va.value, page_mib * MiB).items()})
        d("cuMemAddressFree", ctypes.c_ulonglong(va.value), ctypes.c_size_t(24 << 30))
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}))
        return
    if args.exportable_only:
        out.update(exportable_costs(d, base))
        d("cuMemAddressFree", ctypes.c_ulonglong(base), ctypes.c_size_t(8 << 30))
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}))
        return
    if args.slots_only:
        for k in (8, 16):
            out.update({f"{key}_k{k}": v for key, v in slot_costs(d, base, 8 * MiB, k).items()})
        d("cuMemAddressFree", ctypes.c_ulonglong(base), ctypes.c_size_t(8 << 30))
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}))
        return
    out.update(page_costs(d, base, args.pages, page, "page_idle_"))
    out.update(page_costs(d, base, 8, chunk, "chunk64m_idle_"))
    out["run_unmap_idle"] = run_unmap(d, base, args.pages, page)
    out.update(event_costs(d, stream))
    out.update(device_stall(d, base, 1000, page))
    for threads in (1, 2, 4, 8):
        out.update(parallel_costs(d, base, 512, page, threads))
    out.update(launch_interference(d, base, 256, page))
    # The same with about 300 ms of work queued on the stream that touches none of it.
    for name, fn in (("page_busy_", lambda: page_costs(d, base, args.pages, page, "")),
                     ("run_unmap_busy", lambda: {"": run_unmap(d, base, args.pages, page)})):
        keep = busy(300)
        start = time.perf_counter()
        costs = fn()
        host = (time.perf_counter() - start) * 1e3
        torch.cuda.synchronize()
        out.update({(name + k).rstrip("_"): v for k, v in costs.items()})
        out[name + "host_ms"] = host
        del keep
    start = time.perf_counter()
    keep = busy(300)
    torch.cuda.synchronize()
    out["busy_ms"] = (time.perf_counter() - start) * 1e3
    del keep
    d("cuMemAddressFree", ctypes.c_ulonglong(base), ctypes.c_size_t(8 << 30))
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
