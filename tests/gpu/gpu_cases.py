"""What the GPU test scripts share: a registry of named cases, the environment that finds
the in-repo `gpumem` package, and a runner that skips (exit 77) where torch or a GPU is
missing and reports every case."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

SKIPPED = 77  # ctest's SKIP_RETURN_CODE for the GPU tests


class Cases(dict):
    """name -> function; use as a decorator: @cases.add"""

    def add(self, fn):
        self[fn.__name__] = fn
        return fn


def env_with(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def pop_option(args, name):
    """Removes `name VALUE` from args and returns VALUE (None if absent)."""
    if name not in args:
        return None
    i = args.index(name)
    value = args[i + 1]
    del args[i:i + 2]
    return value


def skip_reason(need_torch_lib=False):
    """Why the cases cannot run here, or None."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if need_torch_lib:
        sys.path.insert(0, PYTHON_DIR)
        from gpumem import _native  # noqa: PLC0415
        if _native.find_library("libgpumem_torch.so") is None:
            return "libgpumem_torch.so not built (CMake did not find Torch)"
    return None


def run(cases, names, need_torch_lib=False):
    """Runs the named cases (all if none), each reported PASS/FAIL; the exit status."""
    reason = skip_reason(need_torch_lib)
    if reason is not None:
        print(f"SKIP: {reason}")
        return SKIPPED
    failed = 0
    for name in names or cases:
        try:
            cases[name]()
            print(f"PASS {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case
            failed += 1
            print(f"FAIL {name}: {e}", flush=True)
    print(f"{len(names or cases) - failed} passed, {failed} failed")
    return 1 if failed else 0
