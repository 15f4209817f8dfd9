"""Python frames in recorded stacks, taken through the CPython API found at run time.

Usage: python_stacks_test.py LIBSHIM. Exits non-zero on failure.
"""
import ctypes
import os
import sys
import tempfile

shim_path = sys.argv[1]
with_gil = ctypes.PyDLL(shim_path)      # calls keep the GIL
without_gil = ctypes.CDLL(shim_path)    # calls release it
failures = []


def record(lib, mode):
    buf = ctypes.create_string_buffer(1 << 16)
    path = os.path.join(tempfile.gettempdir(), f"gpumem_pystack_{os.getpid()}.gpumem")
    n = lib.gpumem_test_record_stack(path.encode(), mode.encode(), buf, len(buf))  # LIB_LINE
    if n < 0:
        failures.append(f"shim failed with {n} in mode {mode}")
        return []
    return buf.value.decode().splitlines()


def check(cond, what):
    if not cond:
        failures.append(what)


class Model:
    def allocate(self, lib, mode):
        return record(lib, mode)  # RECORD_LINE


def train_step(lib, mode):
    return Model().allocate(lib, mode)  # CALL_LINE


src = open(__file__).read().splitlines()
lib_line = next(i + 1 for i, l in enumerate(src) if l.strip().endswith("# LIB_LINE"))
record_line = next(i + 1 for i, l in enumerate(src) if l.strip().endswith("# RECORD_LINE"))
call_line = next(i + 1 for i, l in enumerate(src) if l.strip().endswith("# CALL_LINE"))
me = os.path.abspath(__file__)

frames = train_step(with_gil, "python")
check(len(frames) >= 4, f"python mode: expected >= 4 frames, got {frames}")
if len(frames) >= 4:
    # Innermost first: the frame calling into the library, then its callers.
    check(frames[0] == f"{me}:{lib_line}:record", f"innermost python frame is {frames[0]}")
    check(frames[1] == f"{me}:{record_line}:Model.allocate", f"second frame is {frames[1]}")
    check(frames[2] == f"{me}:{call_line}:train_step", f"third frame is {frames[2]}")
    check(frames[-1].endswith(":<module>"), f"outermost frame is {frames[-1]}")

frames = train_step(without_gil, "python")
check(frames == [], f"without the GIL there must be no python frames, got {frames}")

frames = train_step(with_gil, "all")
check(any(":Model.allocate" in f for f in frames), f"all mode lacks python frames: {frames}")
check(any(":0:" in f for f in frames), f"all mode lacks native frames: {frames}")

frames = train_step(with_gil, "none")
check(frames == [], f"none mode recorded frames: {frames}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("python stacks ok")
