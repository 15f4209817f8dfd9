"""Whether a stitch's maps could leave the allocating thread: the stream is made to wait
(cuStreamWaitValue32 on a host-mapped flag) before the work that uses the new addresses,
and the pages are mapped and granted access after that work was queued, by another
thread, which then sets the flag. Checks that the queued work wrote every page (no fault,
no lost write) and prints one JSON object: the allocating thread's cost of the wait
against mapping the pages itself, per stitch of `--pages` pages, and whether the device
waited for the flag.

usage: python3 async_map_probe.py [--pages 64] [--page-mib 8] [--rounds 8] [--device 0]
"""
import argparse
import ctypes
import json
import statistics
import threading
import time

import torch

from vmm_call_costs import Driver

MiB = 1 << 20
CU_MEMHOSTALLOC_DEVICEMAP = 0x2
CU_STREAM_WAIT_VALUE_GEQ = 0x0


def host_flag(d):
    """A 32-bit word in pinned host memory the device can read: (host view, device ptr)."""
    p = ctypes.c_void_p()
    d("cuMemHostAlloc", ctypes.byref(p), ctypes.c_size_t(4), ctypes.c_uint(CU_MEMHOSTALLOC_DEVICEMAP))
    dev = ctypes.c_ulonglong()
    d("cuMemHostGetDevicePointer_v2", ctypes.byref(dev), p, ctypes.c_uint(0))
    word = ctypes.c_uint32.from_address(p.value)
    word.value = 0
    return word, dev.value


def wait_value(d, stream, addr, value):
    name = "cuStreamWaitValue32_v2" if hasattr(d.lib, "cuStreamWaitValue32_v2") else "cuStreamWaitValue32"
    return d.timed(name, ctypes.c_void_p(stream), ctypes.c_ulonglong(addr),
                   ctypes.c_uint32(value), ctypes.c_uint(CU_STREAM_WAIT_VALUE_GEQ))


def map_run(d, va, handles, page):
    """Map and grant access, as PageHeap::MapPages does: µs on this thread."""
    start = time.perf_counter()
    for i, h in enumerate(handles):
        d.map(va + i * page, page, h)
    d.set_access(va, len(handles) * page)
    return (time.perf_counter() - start) * 1e6


def unmap_run(d, va, pages, page):
    for i in range(pages):
        d.unmap(va + i * page, page)


def written(d, va, pages, page, value):
    """Whether the first and last word of every page hold `value`."""
    out = ctypes.c_uint32()
    for i in range(pages):
        for off in (0, page - 4):
            d("cuMemcpyDtoH_v2", ctypes.byref(out), ctypes.c_ulonglong(va + i * page + off),
              ctypes.c_size_t(4))
            if out.value != value:
                return False
    return True


def one_round(d, context, handles, va, page, flag, flag_dev, stream, value):
    """The async path once: queue device work, the wait, the writes into unmapped pages;
    map on another thread (as gpumem's own would), which then sets the flag; then check.
    (wait µs, whether the device was still waiting once the maps were done and the work
    ahead had run, whether every page was written)."""
    pages = len(handles)
    torch.cuda._sleep(20_000_000)  # ~10 ms of device work queued ahead, as in training
    flag.value = 0
    wait_us = wait_value(d, stream, flag_dev, value)
    d("cuMemsetD32Async", ctypes.c_ulonglong(va), ctypes.c_uint(value),
      ctypes.c_size_t(pages * page // 4), ctypes.c_void_p(stream))
    done = torch.cuda.Event()
    done.record()
    waited = []

    def mapper():
        d("cuCtxSetCurrent", context)
        map_run(d, va, handles, page)
        time.sleep(0.05)  # the work ahead has run: only the flag holds the device now
        waited.append(not done.query())
        flag.value = value

    t = threading.Thread(target=mapper)
    t.start()
    t.join()
    torch.cuda.synchronize()
    ok = written(d, va, pages, page, value)
    unmap_run(d, va, pages, page)
    return wait_us, waited[0], ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=64)
    ap.add_argument("--page-mib", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    torch.cuda.set_device(args.device)
    torch.zeros(1, device="cuda")  # the primary context
    d = Driver(args.device)
    page = args.page_mib * MiB
    va = ctypes.c_ulonglong()
    d("cuMemAddressReserve", ctypes.byref(va), ctypes.c_size_t(args.pages * page),
      ctypes.c_size_t(0), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
    handles = [d.create(page)[0] for _ in range(args.pages)]
    flag, flag_dev = host_flag(d)
    stream = torch.cuda.current_stream().cuda_stream
    context = ctypes.c_void_p()
    d("cuCtxGetCurrent", ctypes.byref(context))
    sync_us, wait_us, all_ok, all_waited = [], [], True, True
    for r in range(args.rounds):
        sync_us.append(map_run(d, va.value, handles, page))  # the path gpumem takes today
        unmap_run(d, va.value, args.pages, page)
        us, waited, ok = one_round(d, context, handles, va.value, page, flag, flag_dev,
                                   stream, r + 1)
        wait_us.append(us)
        all_ok, all_waited = all_ok and ok, all_waited and waited
    for h in handles:
        d.release(h)
    d("cuMemAddressFree", va, ctypes.c_size_t(args.pages * page))
    print(json.dumps({
        "device": torch.cuda.get_device_name(args.device), "pages": args.pages,
        "page_mib": args.page_mib, "rounds": args.rounds,
        "allocating_thread_us_sync_maps": statistics.median(sync_us),
        "allocating_thread_us_wait_value": statistics.median(wait_us),
        "device_waited_for_the_flag": all_waited,
        "every_page_written_after_async_map": all_ok}))


if __name__ == "__main__":
    main()
