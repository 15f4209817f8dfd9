"""Per-allocation cost of recording Python stacks, measured the way a traced PyTorch run
pays it: libgpumem.so's gpumem_alloc/gpumem_free called through ctypes.CDLL (which
releases the GIL around each call, as PyTorch's operators do) from a Python call stack
DEPTH frames deep made of nn.Module-like frames (the 3 innermost new
for every allocation, as each module call makes them), on the sim backend (no GPU).

Each stack mode runs in a child process of its own (the recorder reads GPUMEM_STACKS
once per process): (a) no trace, (b) trace + stacks=none, (c) trace + stacks=python.
The children run round-robin, each round measuring every (depth, idle thread) case, and
the best round counts. Printed: CPU time of the allocating thread (the writer thread's
work is not in it) per alloc+free pair, and what (b) and (c) add to (a)
measured in the same run, as ns and as a ratio.

usage: python_stack_bench.py LIBGPUMEM [--pairs N] [--rounds R] [--depths 10,30]
A smoke run (ctest python_stack_bench_smoke) passes --pairs 200 --rounds 1 --check:
it only checks that every mode ran and that the python trace holds the frames.
Exits 2 on bad arguments, 1 when a child fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODES = [("no trace", None), ("trace, stacks=none", "none"), ("trace, stacks=python", "python")]

CHILD = r'''
import ctypes, json, sys, threading, time

lib = ctypes.CDLL(sys.argv[1])  # releases the GIL around each call, like PyTorch's operators
lib.gpumem_alloc.restype = ctypes.c_void_p
lib.gpumem_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.gpumem_free.restype = None
lib.gpumem_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
pairs = int(sys.argv[2])
depths = [int(d) for d in sys.argv[3].split(",")]
alloc, free = lib.gpumem_alloc, lib.gpumem_free


class Layer:
    # Three frames per call, as torch.nn.Module's __call__ chain makes them.
    def __init__(self, inner=None):
        self.inner = inner

    def _wrapped_call_impl(self, frames, n):
        return self._call_impl(frames - 1, n)

    def _call_impl(self, frames, n):
        return self.forward(frames - 1, n)

    def forward(self, frames, n):
        if self.inner is None:  # an op: allocates its output
            return alloc(4096, 0, None)
        return run(frames - 1, n)


def leaf(n):
    # The training loop's innermost frame: each allocation comes from a fresh call of a
    # layer (3 new frames, as every module call makes), like a model's ops.
    layer = Layer()
    t0 = time.thread_time_ns()  # CPU time: what this thread pays, whatever else runs
    for _ in range(n):
        p = layer._wrapped_call_impl(0, 0)
        free(p, 4096, 0, None)
    return time.thread_time_ns() - t0


def run(frames, n):
    # `frames` Python frames from this one down to leaf's layer, all included.
    if frames >= 9:
        return Layer(Layer())._wrapped_call_impl(frames - 1, n)
    if frames > 5:
        return run(frames - 1, n)
    return leaf(n)


def stack_depth():
    f, depth = sys._getframe(1), 0
    while f is not None:
        f, depth = f.f_back, depth + 1
    return depth


def measure(depth, n):
    # gpumem_alloc sees `depth` frames: run's chain plus this frame and <module>.
    assert stack_depth() == 2
    run(depth - 2, max(1, n // 10))  # warm up: rings, interned stacks
    return run(depth - 2, n) / n


out = {}
for threaded in (False, True):
    stop = threading.Event()
    idle = threading.Thread(target=stop.wait) if threaded else None
    if idle:
        idle.start()
    for depth in depths:
        out[f"{depth},{int(threaded)}"] = measure(depth, pairs)
    if idle:
        stop.set()
        idle.join()
print(json.dumps(out))
'''


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("lib", help="path of libgpumem.so")
    p.add_argument("--pairs", type=int, default=100000, help="alloc+free pairs per case")
    p.add_argument("--rounds", type=int, default=10, help="rounds; the best one counts")
    p.add_argument("--depths", default="10,30", help="Python stack depths, comma-separated")
    p.add_argument("--check", action="store_true",
                   help="also check that the python trace holds the leaf's frames")
    p.add_argument("--cli", help="gpumem CLI for --check (gpumem dump)")
    args = p.parse_args()  # exits 2 on bad arguments
    try:
        depths = [int(d) for d in args.depths.split(",")]
    except ValueError:
        p.error(f"--depths {args.depths!r}: expected integers like 10,30")
    if args.pairs <= 0 or args.rounds <= 0 or any(d < 7 or d > 200 for d in depths):
        p.error("--pairs and --rounds must be positive, depths within 7..200")
    if not os.path.isfile(args.lib):
        p.error(f"{args.lib}: no such file")
    if args.check and not args.cli:
        p.error("--check needs --cli")
    return args


def run_child(script, args, stacks, trace):
    env = dict(os.environ, GPUMEM_BACKEND="sim", GPUMEM_CAPACITY="4G")
    env.pop("GPUMEM_TRACE", None)
    env.pop("GPUMEM_STACKS", None)
    if stacks is not None:
        env.update(GPUMEM_TRACE=trace, GPUMEM_STACKS=stacks)
    child = subprocess.run([sys.executable, script, args.lib, str(args.pairs), args.depths],
                           env=env, capture_output=True, text=True, timeout=600)
    if child.returncode != 0:
        print(f"child ({stacks or 'no trace'}) exited {child.returncode}:\n{child.stderr}")
        sys.exit(1)
    return json.loads(child.stdout.splitlines()[-1])


def check_trace(cli, trace, depths):
    dump = subprocess.run([cli, "dump", "--stacks", trace], capture_output=True, text=True)
    if dump.returncode != 0:
        print(f"gpumem dump exited {dump.returncode}: {dump.stderr}")
        sys.exit(1)
    text = dump.stdout
    deepest, frames = 0, 0
    for line in text.splitlines():
        frames = frames + 1 if line.startswith("    at ") else 0
        deepest = max(deepest, frames)
    if deepest != max(depths):
        print(f"FAIL: the deepest python stack has {deepest} frames, expected {max(depths)}")
        sys.exit(1)
    # ("Layer.forward" from 3.11 on, where code objects have a qualified name.)
    for frame in ("forward (", "_call_impl (", "at leaf (", "at run ("):
        if frame not in text:
            print(f"FAIL: the python trace has no '{frame}' frame:\n{text[:3000]}")
            sys.exit(1)


def main():
    args = parse_args()
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        for _ in range(args.rounds):
            for name, stacks in MODES:
                trace = os.path.join(tmp, f"{stacks}.gpumem")
                for case, ns in run_child(script, args, stacks, trace).items():
                    key = (name, case)
                    best[key] = min(best.get(key, ns), ns)
                if args.check and stacks == "python":
                    check_trace(args.cli, trace, [int(d) for d in args.depths.split(",")])
                if stacks is not None:
                    os.remove(trace)
    print(f"CPU ns of the allocating thread per alloc+free pair through ctypes.CDLL, sim "
          f"backend, best of {args.rounds} "
          f"rounds x {args.pairs} pairs")
    print(f"{'case':<48}{'ns/pair':>9}{'+ns vs a':>10}{'ratio':>8}")
    for depth in args.depths.split(","):
        for threaded in ("0", "1"):
            case = f"{depth},{threaded}"
            base = best[(MODES[0][0], case)]
            label = f"depth {depth}{', idle thread' if threaded == '1' else ''}"
            for i, (name, _) in enumerate(MODES):
                ns = best[(name, case)]
                print(f"{'abc'[i]}) {name + ', ' + label:<45}{ns:9.0f}{ns - base:10.0f}"
                      f"{ns / base:8.3f}")
    if args.check:
        print("check ok: every mode ran; the python trace holds the leaf's frames")


if __name__ == "__main__":
    main()
