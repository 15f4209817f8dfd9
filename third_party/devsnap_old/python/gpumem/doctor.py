"""The torch-level checks of `gpumem doctor`, run by the job's own Python.

Prints one JSON document: {"checks": [{id, status, finding, fix, details}], "facts":
{torch_cuda, library_dirs}}. The CLI merges it with its driver and library checks.
Standalone (run as a file, not through the gpumem package) so that the package's own
imports cannot hide what is wrong with torch.
"""
import glob
import importlib.util
import json
import multiprocessing
import os
import sys


def check(id, status, finding, fix="", **details):
    return {"id": id, "status": status, "finding": finding, "fix": fix, "details": details}


def library_dirs():
    """torch/lib and pip's nvidia/*/lib: where a pip torch's CUDA libraries live.

    Found without importing torch, so they are scanned even when torch fails to import."""
    dirs = []
    for name, pattern in (("torch", "lib"), ("nvidia", "*/lib")):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            dirs += sorted(d for d in glob.glob(os.path.join(root, pattern)) if os.path.isdir(d))
    return dirs


def import_torch():
    """(torch, None) or (None, check saying why not)."""
    try:
        import torch
        return torch, None
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        return None, check("torch", "skipped", f"torch is not installed for {sys.executable}",
                           "pip install torch, or pass --python the interpreter the job uses")
    except Exception as e:  # a broken install: a missing or clashing CUDA library
        return None, check("torch", "fail", f"import torch fails: {type(e).__name__}: {e}",
                           "reinstall torch in a clean environment; see cuda_runtimes for a "
                           "clashing CUDA library on LD_LIBRARY_PATH")


def torch_check(torch):
    version = getattr(torch, "__version__", "?")
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    if cuda is None:
        return check("torch", "fail", f"torch {version} is a CPU-only build (torch.version.cuda "
                     "is None)", "install a CUDA build: pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu124 (pick the cuXY of your driver)",
                     version=version, cuda=None)
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    details = {"version": version, "cuda": cuda, "available": available, "device_count": count}
    if not available:
        return check("torch", "fail", f"torch {version} (CUDA {cuda}) loads but "
                     "torch.cuda.is_available() is False", "see the driver and gpus checks",
                     **details)
    return check("torch", "ok", f"torch {version} (CUDA {cuda}) loads and sees {count} GPU(s)",
                 **details)


def start_method_check(torch):
    """Would DataLoader workers be forked, and after CUDA was initialized?"""
    mp = getattr(torch, "multiprocessing", multiprocessing) if torch else multiprocessing
    method = mp.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()
    initialized = bool(torch and torch.cuda.is_initialized())
    details = {"start_method": method, "cuda_initialized_at_import": initialized}
    if method != "fork":
        return check("start_method", "ok", f"workers start with '{method}': CUDA in a worker "
                     "is safe", **details)
    fix = ("DataLoader(..., multiprocessing_context='spawn'), or keep CUDA out of workers "
           "(move batches to the GPU in the main process; pin_memory=True is fine)")
    if initialized:
        return check("start_method", "fail", "CUDA is already initialized when torch is "
                     "imported, and workers fork: any worker that touches CUDA fails "
                     "('Cannot re-initialize CUDA in forked subprocess')", fix, **details)
    return check("start_method", "warn", "DataLoader workers fork ('fork' is the default on "
                 "Linux): a worker that uses CUDA after the parent initialized it fails "
                 "('Cannot re-initialize CUDA in forked subprocess')", fix, **details)


def libgpumem_torch_check(torch):
    lib_dir = os.environ.get("GPUMEM_LIB_DIR", "")
    path = os.path.join(lib_dir, "libgpumem_torch.so")
    if torch is None:
        return check("libgpumem_torch", "skipped", "needs torch (see torch)")
    if not os.path.isfile(path):
        return check("libgpumem_torch", "skipped", f"{path} not built (needs libtorch at build "
                     "time): profile-only runs lose backward attribution",
                     "cmake -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print("
                     "torch.utils.cmake_prefix_path)') and rebuild")
    import ctypes
    try:
        ctypes.CDLL(path)
    except OSError as e:
        return check("libgpumem_torch", "fail", f"{path} does not load with torch "
                     f"{torch.__version__}: {e}", "rebuild gpumem against this torch")
    return check("libgpumem_torch", "ok", f"{path} loads")


def main():
    facts = {"torch_cuda": None, "library_dirs": library_dirs()}
    torch, failed = import_torch()
    checks = [failed or torch_check(torch)]
    if torch is not None:
        facts["torch_cuda"] = getattr(torch.version, "cuda", None)
    checks.append(start_method_check(torch))
    checks.append(libgpumem_torch_check(torch))
    json.dump({"checks": checks, "facts": facts}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
