"""PyTorch on gpumem, on a real GPU. Each case runs in a fresh Python process (the
allocator can be installed only once per process). Exit 77 (skipped) without torch or GPU.

usage: torch_test.py [--cli path/to/gpumem] [case ...]
"""
import os
import subprocess
import sys
import textwrap

from gpu_cases import PYTHON_DIR, Cases, env_with, pop_option, run

PRELOAD_DIR = os.path.join(PYTHON_DIR, "gpumem", "_preload")

PRELUDE = """
import os, sys, threading
import torch
import gpumem
"""

CASES = Cases()
case = CASES.add


def run_python(code, env_extra=None, argv_prefix=None):
    env = env_with(env_extra)
    argv = (argv_prefix or []) + [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def expect_ok(code, **kw):
    r = run_python(PRELUDE + textwrap.dedent(code), **kw)
    if r.returncode != 0 or "OK" not in r.stdout:
        raise AssertionError(f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


@case
def kernels_write_and_check_every_tensor():
    expect_ok("""
        gpumem.install()
        torch.manual_seed(0)
        tensors = []
        for i, n in enumerate([1, 100, 4096, 65536, 262144, 1 << 20, 3 << 20, 40 << 20]):
            for r in range(3):
                t = torch.full((n,), float(i * 10 + r), device="cuda")
                tensors.append((t, float(i * 10 + r)))
        for t, v in tensors:
            assert bool((t == v).all()), (t.numel(), v)
        a = torch.randn(512, 384, device="cuda", dtype=torch.float64)
        b = torch.randn(384, 256, device="cuda", dtype=torch.float64)
        ref = a.cpu() @ b.cpu()
        assert torch.allclose((a @ b).cpu(), ref, rtol=1e-12, atol=1e-12)
        s = gpumem.stats()
        assert s["alloc_count"] >= len(tensors) and s["allocated_bytes"] > 0, s
        print("OK", s["alloc_count"], gpumem.backend())
    """)


@case
def streams_and_threads():
    expect_ok("""
        gpumem.install()
        errors = []
        def worker(k):
            try:
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    for i in range(50):
                        n = 1000 * (1 + (i * 7 + k) % 300)
                        x = torch.arange(n, device="cuda", dtype=torch.float32) + k
                        y = x * 2
                        s.synchronize()
                        expect = (torch.arange(n, dtype=torch.float32) + k) * 2
                        if not torch.equal(y.cpu(), expect):
                            errors.append((k, i))
            except Exception as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors, errors
        print("OK")
    """)


@case
def record_stream_keeps_a_block_for_the_other_stream():
    expect_ok("""
        gpumem.install()
        side = torch.cuda.Stream()
        n = 16 << 20
        x = torch.arange(n, device="cuda", dtype=torch.float32)
        big = torch.empty(256 << 20, device="cuda")
        torch.cuda.synchronize()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(30):
                big.mul_(1.0001)     # keep the side stream busy
            z = x * 2                 # reads x late, on the side stream
        x.record_stream(side)
        z.record_stream(side)
        old = x.data_ptr()
        del x                         # freed on the default stream while `side` still reads it
        y = torch.full((n,), 7.0, device="cuda")   # would overwrite x if reused now
        torch.cuda.synchronize()
        expect = torch.arange(n, dtype=torch.float32) * 2
        assert torch.equal(z.cpu(), expect), "the side stream read memory that was reused"
        print("OK reused" if y.data_ptr() == old else "OK not-reused")
    """)


@case
def out_of_memory_raises_torch_oom_and_recovers():
    expect_ok("""
        gpumem.install()
        total = torch.cuda.mem_get_info()[1]
        try:
            torch.empty(total * 2, dtype=torch.uint8, device="cuda")
            raise SystemExit("no error for a tensor twice the device")
        except torch.OutOfMemoryError as e:
            assert "gpumem" in str(e), str(e)
        torch.cuda.set_per_process_memory_fraction(0.01)
        cap = int(total * 0.01)
        assert gpumem.stats()["capacity_bytes"] == cap, (gpumem.stats(), cap)
        try:
            torch.empty(cap + (64 << 20), dtype=torch.uint8, device="cuda")
            raise SystemExit("no error above the memory fraction")
        except torch.OutOfMemoryError:
            pass
        t = torch.ones(1 << 20, device="cuda")
        assert float(t.sum()) == float(1 << 20)
        assert gpumem.stats()["oom_count"] >= 2
        print("OK")
    """, env_extra={"GPUMEM_LOG_OOM": "0"})


@case
def empty_cache_returns_every_byte():
    expect_ok("""
        gpumem.install()
        torch.zeros(1, device="cuda"); torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free0 = torch.cuda.mem_get_info()[0]
        ts = [torch.empty(n, dtype=torch.uint8, device="cuda")
              for n in [512, 70000, 2 << 20, 37 << 20, 700 << 20] * 3]
        assert free0 - torch.cuda.mem_get_info()[0] >= sum(t.numel() for t in ts)
        del ts
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        s = gpumem.stats()
        free1 = torch.cuda.mem_get_info()[0]
        # one 1-element tensor stays alive only if something held it; none does here
        assert s["allocated_bytes"] == 0, s
        assert s["reserved_bytes"] == 0, s
        assert free0 - free1 <= (2 << 20), (free0, free1)
        print("OK")
    """)


@case
def installing_too_late_is_a_clear_error():
    expect_ok("""
        torch.zeros(1, device="cuda")
        try:
            gpumem.install()
            raise SystemExit("install after CUDA use did not fail")
        except gpumem.InstallError as e:
            msg = str(e)
            assert "before" in msg and "gpumem run" in msg, msg
        print("OK")
    """)


@case
def preload_by_environment_variable():
    code = """
        import torch
        x = torch.ones(1000, device="cuda") * 3
        import gpumem
        assert gpumem.installed(), "GPUMEM=1 did not install gpumem"
        assert gpumem.stats()["alloc_count"] >= 2
        print("OK", float(x.sum()))
    """
    env = {"GPUMEM": "1",
           "PYTHONPATH": PRELOAD_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = run_python(code, env_extra=env)
    assert r.returncode == 0 and "OK 3000.0" in r.stdout, (r.stdout, r.stderr)


@case
def gpumem_run_launcher():
    if not ARGS_CLI:
        print("  (no --cli given; skipped)")
        return
    code = """
        import torch
        y = torch.arange(10, device="cuda").sum()
        import gpumem
        assert gpumem.installed()
        print("OK", int(y), gpumem.stats()["capacity_bytes"])
    """
    r = run_python(code, argv_prefix=[ARGS_CLI, "run", "--capacity", "3G", "--"])
    assert r.returncode == 0 and f"OK 45 {3 << 30}" in r.stdout, (r.stdout, r.stderr)
    bad = run_python("print('ran')", argv_prefix=[ARGS_CLI, "run", "--backend", "tpu", "--"])
    assert bad.returncode == 2 and "GPUMEM_BACKEND='tpu'" in bad.stderr, (bad.stdout, bad.stderr)


@case
def bad_variable_stops_startup():
    env = {"GPUMEM": "1", "GPUMEM_CAPACITY": "lots",
           "PYTHONPATH": PRELOAD_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = run_python("import torch; print('ran on')", env_extra=env)
    assert r.returncode != 0 and "ran on" not in r.stdout, (r.stdout, r.stderr)
    assert "GPUMEM_CAPACITY='lots'" in r.stderr, r.stderr


ARGS_CLI = None


def main():
    global ARGS_CLI
    args = sys.argv[1:]
    ARGS_CLI = pop_option(args, "--cli")
    return run(CASES, args)


if __name__ == "__main__":
    sys.exit(main())
