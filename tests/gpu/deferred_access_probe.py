"""Whether the access grant of a stitch could leave the allocating thread. The pages are
mapped on the allocating thread (cuMemMap, ~2 us a page: the pointer is then a mapped
one, which the driver checks when a call that takes it is queued), the stream is made to
wait on the device for a flag (cuStreamWaitValue32), a memset and a copy from the host
into the new pages are queued behind the wait, and another thread grants access
(cuMemSetAccess, ~27 us a mapping) and then sets the flag. Prints one JSON object: the
allocating thread's microseconds per stitch both ways, whether each queued call was
accepted, whether the device waited for the flag, and whether every page was written.

usage: python3 deferred_access_probe.py [--pages 32] [--page-mib 8] [--rounds 8]
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


def attempt(d, name, *args):
    """Runs a driver call; the error text instead of raising."""
    try:
        d(name, *args)
        return "ok"
    except RuntimeError as e:
        return str(e)


class Stitch:
    def __init__(self, d, va, handles, page, stream):
        self.d, self.va, self.handles, self.page, self.stream = d, va, handles, page, stream
        self.n = len(handles)

    def map_pages(self):
        start = time.perf_counter()
        for i, h in enumerate(self.handles):
            self.d.map(self.va + i * self.page, self.page, h)
        return (time.perf_counter() - start) * 1e6

    def grant(self):
        return self.d.set_access(self.va, self.n * self.page)

    def unmap(self):
        for i in range(self.n):
            self.d.unmap(self.va + i * self.page, self.page)

    def written(self, value):
        out = ctypes.c_uint32()
        for i in range(self.n):
            for off in (4, self.page - 4):
                self.d("cuMemcpyDtoH_v2", ctypes.byref(out),
                       ctypes.c_ulonglong(self.va + i * self.page + off), ctypes.c_size_t(4))
                if out.value != value:
                    return False
        return True


def deferred_round(d, s, context, flag, flag_dev, value, source):
    """Maps here, queues the wait, a memset and a copy, grants access on another thread."""
    torch.cuda._sleep(20_000_000)  # ~10 ms of device work queued ahead, as in training
    flag.value = 0
    t0 = time.perf_counter()
    s.map_pages()
    wait_name = ("cuStreamWaitValue32_v2" if hasattr(d.lib, "cuStreamWaitValue32_v2")
                 else "cuStreamWaitValue32")
    queued = {"wait": attempt(d, wait_name, ctypes.c_void_p(s.stream), ctypes.c_ulonglong(flag_dev),
                              ctypes.c_uint32(value), ctypes.c_uint(CU_STREAM_WAIT_VALUE_GEQ))}
    here_us = (time.perf_counter() - t0) * 1e6
    queued["memset"] = attempt(d, "cuMemsetD32Async", ctypes.c_ulonglong(s.va), ctypes.c_uint(value),
                               ctypes.c_size_t(s.n * s.page // 4), ctypes.c_void_p(s.stream))
    # The first word of each page again, from the host: a copy takes a pointer too.
    queued["copy"] = attempt(d, "cuMemcpyHtoDAsync_v2", ctypes.c_ulonglong(s.va),
                             ctypes.byref(source), ctypes.c_size_t(4), ctypes.c_void_p(s.stream))
    done = torch.cuda.Event()
    done.record()
    result = {}

    def granter():
        d("cuCtxSetCurrent", context)
        result["grant_us"] = s.grant()
        time.sleep(0.05)  # the work ahead has run: only the flag holds the device now
        result["waited"] = not done.query()
        flag.value = value

    t = threading.Thread(target=granter)
    t.start()
    t.join()
    torch.cuda.synchronize()
    ok = all(v == "ok" for v in queued.values()) and s.written(value)
    s.unmap()
    return here_us, result, queued, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=32)
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
    s = Stitch(d, va.value, [d.create(page)[0] for _ in range(args.pages)], page,
               torch.cuda.current_stream().cuda_stream)
    flag, flag_dev = host_flag(d)
    context = ctypes.c_void_p()
    d("cuCtxGetCurrent", ctypes.byref(context))
    sync_us, here_us, grant_us, waited, all_ok, queued = [], [], [], True, True, {}
    for r in range(args.rounds):
        t0 = time.perf_counter()
        s.map_pages()
        s.grant()
        sync_us.append((time.perf_counter() - t0) * 1e6)  # what gpumem's thread pays today
        s.unmap()
        source = ctypes.c_uint32(r + 1)
        us, result, queued, ok = deferred_round(d, s, context, flag, flag_dev, r + 1, source)
        here_us.append(us)
        grant_us.append(result["grant_us"])
        waited, all_ok = waited and result["waited"], all_ok and ok
        if not ok:
            break
    for h in s.handles:
        d.release(h)
    d("cuMemAddressFree", va, ctypes.c_size_t(args.pages * page))
    print(json.dumps({
        "device": torch.cuda.get_device_name(args.device), "pages": args.pages,
        "page_mib": args.page_mib, "rounds": len(sync_us),
        "allocating_thread_us_map_and_grant": statistics.median(sync_us),
        "allocating_thread_us_map_and_wait": statistics.median(here_us),
        "other_thread_us_grant": statistics.median(grant_us),
        "queued_calls": queued, "device_waited_for_the_flag": waited,
        "every_page_written": all_ok}))


if __name__ == "__main__":
    main()
