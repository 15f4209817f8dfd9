"""Out-of-memory that does not say so: a batch-size finder (or a script that grabs the
GPU) fills it, catches its OOM and trains, then something takes device memory outside the
allocator. Natively that fails with a library's own error when the cache left the driver
too little (certain after the grab; after a finder it depends on how the last tries
split the cache); under gpumem's allocator the headroom leaves room for it; in
profile-only mode gpumem names it an out-of-memory. For diagnosis_matrix.py
(`--script hidden_oom_cases.py`): each case has the verdict expected under
profile-only mode and under gpumem's allocator ("completes": the run ends normally).

usage: hidden_oom_cases.py CASE | list
"""
import os
import threading

import torch

from case_registry import Cases

CASES = Cases()
case = CASES.case


DTYPE = torch.bfloat16  # a fast step: the finder's tries at tens of GiB take seconds


def train_step(net, opt, n):
    loss = net(torch.randn(n, 4096, device="cuda", dtype=DTYPE)).float().pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def finder_then_train(steps=20):
    """A finder as Lightning's binsearch mode goes: double the batch until a training step
    fails, then bisect between the last that fitted and the first that failed (to 64
    rows, about 8 MiB), catching each OOM; then train at the largest batch that fitted.
    Natively that leaves the driver almost nothing."""
    net = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                              torch.nn.Linear(4096, 4096)).to("cuda", DTYPE)
    opt = torch.optim.SGD(net.parameters(), lr=1e-6)

    def fits(n):
        try:
            train_step(net, opt, n)
            return True
        except torch.OutOfMemoryError:
            return False

    low = 4096
    while fits(low * 2):
        low *= 2
    high = low * 2
    while high - low > 64:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    for _ in range(steps):
        train_step(net, opt, low)
    return net


def validate_in_a_new_thread(net):
    """A new thread: cuBLAS makes a handle and a workspace for it."""
    errors = []

    def validate():
        try:
            with torch.no_grad():
                net(torch.randn(64, 4096, device="cuda", dtype=DTYPE)).sum().item()
        except Exception as e:  # re-raised in the main thread, as trainers do
            errors.append(e)

    t = threading.Thread(target=validate)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def grab_the_gpu():
    """Hold the GPU as some scripts do on shared machines: the largest buffer that fits
    (bisected to 2 MiB), freed at once so that the cache keeps it."""
    low, high = 0, torch.cuda.mem_get_info()[1]
    while high - low > (2 << 20):
        mid = (low + high) // 2
        try:
            del_me = torch.empty(mid, dtype=torch.uint8, device="cuda")
            del del_me
            low = mid
        except torch.OutOfMemoryError:
            high = mid
    held = torch.empty(low, dtype=torch.uint8, device="cuda")
    del held


@case("out of memory outside the allocator", "completes")
def grab_then_cublas():
    """The grab, then train: the first matmul makes cuBLAS's handle, then a new thread
    makes another. On an H200 (driver 580) the native run dies before that, loading the
    first kernel it had not run yet (CUDA loads modules lazily)."""
    net = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                              torch.nn.Linear(4096, 4096)).to("cuda", DTYPE)
    opt = torch.optim.SGD(net.parameters(), lr=1e-6)
    grab_the_gpu()
    for _ in range(20):
        train_step(net, opt, 4096)
    validate_in_a_new_thread(net)


@case("out of memory outside the allocator", "completes")
def grab_then_cudnn():
    """The grab, then a convolutional net: the first convolution makes cuDNN's handle
    and loads its kernels. The input's and the loss's kernels run once before the grab,
    so that cuDNN is the first to need memory (without that the native run died loading
    the input's kernel)."""
    net = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(64, 64, 3, padding=1)).to("cuda", DTYPE)
    opt = torch.optim.SGD(net.parameters(), lr=1e-6)
    torch.randn(32, 64, 64, 64, device="cuda", dtype=DTYPE).float().pow(2).mean().item()
    grab_the_gpu()
    for _ in range(20):
        x = torch.randn(32, 64, 64, 64, device="cuda", dtype=DTYPE)
        loss = net(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@case("out of memory outside the allocator", "completes")
def finder_then_cublas_in_a_new_thread():
    validate_in_a_new_thread(finder_then_train())


@case("out of memory outside the allocator", "completes")
def finder_then_lazy_nccl():
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29600 + os.getpid() % 1000))
    dist.init_process_group("nccl", rank=0, world_size=1)
    finder_then_train()
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)  # the communicator and its buffers are made here
    dist.destroy_process_group()


@case("out of memory outside the allocator", "completes")
def finder_then_cufft_plan():
    finder_then_train()
    x = torch.randn(1 << 24, device="cuda")
    torch.fft.rfft(x).abs().sum().item()  # a cuFFT plan and its work area


@case("leak", "leak")
def leak_fills_before_a_new_handle():
    net = torch.nn.Linear(4096, 4096).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    kept = []
    for _ in range(100000):
        out = net(torch.randn(8192, 4096, device="cuda"))  # LEAK: kept below
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(out)
        if len(kept) % 50 == 0:  # now and then a new stream: new cuBLAS workspace
            with torch.cuda.stream(torch.cuda.Stream()):
                net(torch.randn(64, 4096, device="cuda")).sum().item()


if __name__ == "__main__":
    CASES.main()
