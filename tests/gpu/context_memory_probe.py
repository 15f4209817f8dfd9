#!/usr/bin/env python3
"""What the driver counts on a device beyond the allocator, stage by stage.

Prints one JSON line per stage of a small PyTorch run on one GPU: the driver's used bytes
(cudaMemGetInfo), the caching allocator's reserved bytes, and NVML's figures (the
device's used bytes and each process's), so that the CUDA context at creation, the kernels
loaded later (cuBLAS, cuDNN, NCCL) and other processes can be told apart.

Last, what a read of each costs (the recorder reads NVML at step ends).

usage: context_memory_probe.py [--device N]
"""
import argparse
import ctypes
import json
import os
import time


class ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_t (v2/v3 layout)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class MemoryInfo(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Nvml:
    def __init__(self, index):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.handle = ctypes.c_void_p()
        rc = self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle))
        if rc != 0:
            raise RuntimeError(f"nvmlDeviceGetHandleByIndex_v2: {rc}")

    def device_used(self):
        info = MemoryInfo()
        rc = self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(info))
        return info.used if rc == 0 else None

    def processes(self):
        count = ctypes.c_uint(64)
        infos = (ProcessInfo * 64)()
        fn = getattr(self.lib, "nvmlDeviceGetComputeRunningProcesses_v3", None)
        if fn is None:
            return {"error": "no v3"}
        rc = fn(self.handle, ctypes.byref(count), infos)
        if rc != 0:
            return {"error": rc}
        return {str(infos[i].pid): infos[i].usedGpuMemory for i in range(count.value)}


def stage(name, nvml, torch=None):
    line = {"stage": name, "pid": os.getpid(), "nvml_device_used": nvml.device_used(),
            "nvml_processes": nvml.processes()}
    if torch is not None and torch.cuda.is_initialized():
        free, total = torch.cuda.mem_get_info()
        line["driver_used"] = total - free
        line["reserved"] = torch.cuda.memory_reserved()
    print(json.dumps(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    nvml = Nvml(args.device)
    stage("before torch", nvml)
    import torch
    stage("torch imported", nvml, torch)
    torch.cuda.set_device(args.device)
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    stage("context made, one tensor", nvml, torch)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    stage("bf16 matmul (cuBLAS)", nvml, torch)
    conv = torch.nn.Conv2d(64, 64, 3).cuda()
    conv(torch.randn(8, 64, 64, 64, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    stage("conv forward+backward (cuDNN)", nvml, torch)
    m = torch.nn.TransformerEncoderLayer(512, 8, batch_first=True).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        m(torch.randn(8, 128, 512, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    stage("transformer layer, autocast", nvml, torch)
    del x, a, conv, m
    torch.cuda.empty_cache()
    stage("after empty_cache", nvml, torch)
    print(json.dumps({"stage": "read costs, us (median of 200)",
                      "nvml_processes": median_us(nvml.processes),
                      "cuda_mem_get_info": median_us(torch.cuda.mem_get_info)}), flush=True)


def median_us(fn, n=200):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return round(sorted(times)[n // 2], 1)


if __name__ == "__main__":
    main()
