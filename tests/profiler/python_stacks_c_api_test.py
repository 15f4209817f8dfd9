"""Python frames through the real C ABI, as PyTorch calls it.

PyTorch releases the GIL around every operator, so libgpumem.so's gpumem_alloc is called
by a Python thread that does not hold the GIL. ctypes.CDLL calls do the same, so this
script, with the sim backend and GPUMEM_TRACE set, reproduces a traced training run's
allocations without a GPU. It also runs a thread that calls with the GIL held (PyDLL)
alongside one that calls without it: taking the GIL back under the allocator's lock
would deadlock them, so the child has a time limit.

usage: python_stacks_c_api_test.py LIBGPUMEM GPUMEM_CLI. Exits non-zero on failure.
"""
import os
import re
import subprocess
import sys
import tempfile

CHILD = r'''
import ctypes, sys, threading
released = ctypes.CDLL(sys.argv[1])   # calls release the GIL, like PyTorch's operators
held = ctypes.PyDLL(sys.argv[1])      # calls keep it
for lib in (released, held):
    lib.gpumem_alloc.restype = ctypes.c_void_p
    lib.gpumem_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.gpumem_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]


def leaky_forward(lib):
    return lib.gpumem_alloc(1 << 20, 0, None)  # ALLOC_LINE


def train_step(lib):
    return leaky_forward(lib)  # STEP_LINE


kept = [train_step(released)]
assert kept[0], "allocation failed"


def churn(lib):
    for _ in range(3000):
        p = lib.gpumem_alloc(4096, 0, None)
        lib.gpumem_free(p, 4096, 0, None)


threads = [threading.Thread(target=churn, args=(lib,)) for lib in (released, held)]
for t in threads:
    t.start()
for t in threads:
    t.join()

# As libgpumem_torch does on an autograd engine thread: the running backward node is
# linked before the allocation. A C++ node's allocation takes no Python frame (the GIL is
# not taken back for it); a Python-defined Function's (PyNode) does.
released.gpumem_autograd_node_frame.restype = ctypes.c_uint32
released.gpumem_autograd_node_frame.argtypes = [ctypes.c_char_p]
released.gpumem_set_autograd_link.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32]
# (Sequence numbers no forward op had, so the reader adds no forward stack to them.)
for seq, name, size in ((10**6, b"MmBackward0", 8192 * 3), (10**6 + 1, b"PyNode", 8192 * 5)):
    released.gpumem_set_autograd_link(seq, 1, released.gpumem_autograd_node_frame(name))
    kept.append(released.gpumem_alloc(size, 0, None))  # BACKWARD_LINE
'''


def main():
    lib, cli = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        src = CHILD.splitlines()
        alloc_line = next(i + 1 for i, l in enumerate(src) if l.endswith("# ALLOC_LINE"))
        step_line = next(i + 1 for i, l in enumerate(src) if l.endswith("# STEP_LINE"))
        trace = os.path.join(tmp, "t.gpumem")
        env = dict(os.environ, GPUMEM_BACKEND="sim", GPUMEM_CAPACITY="1G",
                   GPUMEM_TRACE=trace, GPUMEM_STACKS="python")
        try:
            child = subprocess.run([sys.executable, script, lib], env=env, timeout=60,
                                   capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            print("FAIL: the child hung (GIL and allocator lock deadlock?)")
            return 1
        if child.returncode != 0:
            print(f"FAIL: child exited {child.returncode}: {child.stderr[-2000:]}")
            return 1
        dump = subprocess.run([cli, "dump", "--stacks", trace], capture_output=True, text=True)
        if dump.returncode != 0:
            print(f"FAIL: gpumem dump exited {dump.returncode}: {dump.stderr}")
            return 1
        lines = dump.stdout.splitlines()
        # The first allocation's frames, innermost first.
        first = next((i for i, l in enumerate(lines) if "alloc" in l.split("\t")[1:2]
                      or re.search(r"\talloc\t", l)), None)
        frames = []
        if first is not None:
            for l in lines[first + 1:]:
                if not l.startswith("    at "):
                    break
                frames.append(l.strip())
        want0 = f"at leaky_forward ({script}:{alloc_line})"
        want1 = f"at train_step ({script}:{step_line})"
        if frames[:2] != [want0, want1]:
            failures.append(f"first allocation's frames {frames}, expected {want0}, {want1}")
        def frames_of(size):
            at = next((i for i, l in enumerate(lines)
                       if re.search(rf"\talloc\t.*\tsize={size}\t", l)), None)
            if at is None:
                return None
            frames = []
            for l in lines[at + 1:]:
                if not l.startswith("    at "):
                    break
                frames.append(l.strip())
            return frames
        cpp_node, py_node = frames_of(8192 * 3), frames_of(8192 * 5)
        if cpp_node is None or py_node is None:
            failures.append("the backward-node allocations are missing from the trace")
        else:
            if any(f.startswith("at <module>") for f in cpp_node):
                failures.append(f"a C++ backward node's allocation has Python frames {cpp_node}")
            if not any(f.startswith("at <module>") for f in py_node):
                failures.append(f"a PyNode's allocation lacks its Python frames {py_node}")
        churn = sum(1 for l in lines if l.strip().startswith("at churn ("))
        if churn < 6000:
            failures.append(f"{churn} churn frames, expected >= 6000 (both threads' allocs)")
    if failures:
        print("\n".join(failures))
        print(dump.stdout[:3000])
        return 1
    print("python stacks through the C ABI ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
