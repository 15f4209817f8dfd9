"""Cost per recorded event with Python stacks, from a real Python call stack ~20 frames
deep (like a model's forward). Not a test: prints figures for docs/profiler.md.
Usage: python_stack_cost.py LIBSHIM"""
import ctypes
import os
import sys
import tempfile

lib = ctypes.PyDLL(sys.argv[1])
lib.gpumem_test_ns_per_event.restype = ctypes.c_double
path = os.path.join(tempfile.gettempdir(), f"gpumem_cost_{os.getpid()}.gpumem").encode()


def nested(depth, mode, n):
    if depth == 0:
        return lib.gpumem_test_ns_per_event(path, mode.encode(), n)
    return nested(depth - 1, mode, n)


for mode in ["none", "python", "native", "all"]:
    best = min(nested(20, mode, 20000) for _ in range(3))
    print(f"{mode:>7}: {best:8.1f} ns CPU per event (best of 3, 20000 events, ~22 Python frames)")
