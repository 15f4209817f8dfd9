"""gpumem: a GPU memory allocator and leak profiler for PyTorch training.

    import torch, gpumem
    gpumem.install()          # before the first CUDA tensor
    ...
    gpumem.step()             # optional: each optimizer step already marks a step
    print(gpumem.memory_summary())

Or with no code change: ``gpumem run -- python train.py`` or ``GPUMEM=1 python train.py``
(with gpumem's python/gpumem/_preload folder on PYTHONPATH, which `gpumem run` sets).

Profile-only (PyTorch keeps its own allocator; gpumem records it into the trace):
``gpumem.profile()`` after `import torch`, ``gpumem run --profile-only -- python train.py``
or GPUMEM_MODE=profile. Read the trace with ``gpumem report``.
"""
import json
import warnings

from . import (_capacity, _device, _exit_oom, _graph_marks, _graph_pools, _loop_marks, _native,
               _steps)
from ._version import __version__  # noqa: F401

__all__ = ["install", "installed", "profile", "profiling", "stats", "memory_summary", "snapshot", "step",
           "empty_cache", "set_capacity", "reset_peak_stats", "last_oom", "trace_events", "pause_trace",
           "backend", "InstallError"]

_installed = False
_profile_queued = False


class InstallError(RuntimeError):
    """gpumem could not become PyTorch's CUDA allocator (the message says how to fix it)."""


def _config_error():
    return _native.text(_native.lib().gpumem_config_error)


def _profile_mode():
    import os
    return os.environ.get("GPUMEM_MODE", "") == "profile"


def _attach_profiler():
    import ctypes
    import torch
    buf = ctypes.create_string_buffer(4096)
    if _native.torch_lib().gpumem_torch_profile(buf, len(buf)) != 0:
        raise InstallError(buf.value.decode("utf-8", "replace"))
    _capacity.record_device_totals(torch)
    global _profiler_attached
    _profiler_attached = True
    if _user_history is not None:
        _apply_user_history(*_user_history)


_CONTEXT_LEVELS = {None: 0, "state": 1, "alloc": 2, "all": 3}
_profiler_attached = False
_user_history = None  # (on, when, cpp, max_entries) the program last asked PyTorch for


def _apply_user_history(on, when, cpp, entries):
    import ctypes
    buf = ctypes.create_string_buffer(1024)
    if _native.torch_lib().gpumem_torch_profile_user_history(on, when, cpp, entries, buf,
                                                             len(buf)) != 0:
        warnings.warn("gpumem: " + buf.value.decode("utf-8", "replace"))


def _keep_recorder_under_user_history(torch):
    """torch.cuda.memory._record_memory_history replaces PyTorch's context recorder, which
    profile-only mode uses to take each allocation's stack. After the program's call, put
    gpumem's recorder back, serving the program's history as well (same ring size, same
    tracebacks in its snapshots)."""
    original = getattr(torch._C, "_cuda_record_memory_history", None)
    if original is None or getattr(original, "_gpumem", False):
        return
    def record_memory_history(enabled, context="all", stacks="all", max_entries=2**62, *rest):
        global _user_history
        original(enabled, context, stacks, max_entries, *rest)
        on = enabled is not None
        when = _CONTEXT_LEVELS.get(context, 3) if on else 0
        entries = max_entries if enabled == "all" else 1
        _user_history = (int(on), when, int(stacks == "all"), min(entries, 2**62))
        if _profiler_attached:  # else _attach_profiler applies it once CUDA is up
            _apply_user_history(*_user_history)

    record_memory_history._gpumem = True
    torch._C._cuda_record_memory_history = record_memory_history


def _watch_training(torch, profile_mode):
    """Both modes: step marks at optimizer steps (or backward passes, model calls or CUDA
    graph replays, in loops with no optimizer), memory-fraction caps in the trace, and a
    library's CUDA error that ends the program named as the out-of-memory it is."""
    _steps.watch_optimizers(torch)
    _loop_marks.watch_backward(torch)
    _loop_marks.watch_model_calls(torch)
    _graph_marks.watch_graph_replays(torch)
    _graph_pools.watch_graph_pools(torch)
    _capacity.watch_memory_fraction(torch)
    _exit_oom.install(torch, profile_mode)


def profile():
    """Profile-only mode: PyTorch keeps its own caching allocator and gpumem records its
    allocations, frees and segments with stacks into the trace (GPUMEM_TRACE, default
    gpumem-<pid>.gpumem, gpumem-rank<rank>-<host>-<pid>.gpumem under torchrun or srun).
    Call it any time after `import torch`; recording, and the trace file, start when CUDA
    initializes (at once if it already has). Needs libgpumem_torch.so."""
    global _profile_queued
    if _profile_queued:
        return
    import torch
    err = _config_error()
    if err:
        raise InstallError(err)
    if _native.torch_lib() is None:
        raise InstallError(
            "gpumem: profile-only mode needs libgpumem_torch.so, which is built only where "
            "CMake finds Torch (configure with -DCMAKE_PREFIX_PATH=$(python -c 'import "
            "torch;print(torch.utils.cmake_prefix_path)'))")
    _check_trace()
    _keep_recorder_under_user_history(torch)
    if torch.cuda.is_initialized():
        _attach_profiler()
    else:
        # PyTorch's allocator takes a tracker only once CUDA is up; queue it with
        # torch.cuda's lazy init rather than initializing CUDA early ourselves.
        torch.cuda._lazy_call(_attach_profiler)
    _watch_training(torch, True)
    _profile_queued = True


def _check_trace():
    """Says now if the trace cannot be recorded. The file itself opens when CUDA starts:
    a process that never uses CUDA (torchrun's launcher) writes no trace."""
    check = getattr(_native.lib(), "gpumem_trace_check", None)  # absent from older builds
    problem = _native.text(check) if check is not None else ""
    if problem:
        raise InstallError("gpumem: " + problem)


def profiling():
    """True once profile() was called (recording starts with CUDA)."""
    return _profile_queued


def install():
    """Makes gpumem PyTorch's CUDA allocator. Call it before any tensor goes to the GPU.
    With GPUMEM_MODE=profile it starts profile() instead."""
    global _installed
    if _installed:
        return
    import torch
    err = _config_error()
    if err:
        raise InstallError(err)
    if _profile_mode():
        profile()
        return
    torch_lib = _native.torch_lib()
    if torch_lib is not None:
        import ctypes
        buf = ctypes.create_string_buffer(4096)
        if torch_lib.gpumem_torch_install(buf, len(buf)) != 0:
            raise InstallError(buf.value.decode("utf-8", "replace"))
    else:
        # Without libgpumem_torch.so only alloc/free can be wired from Python: PyTorch
        # exposes no other pluggable hook there.
        warnings.warn(
            "gpumem: libgpumem_torch.so not found (built only where CMake finds Torch): "
            "torch.cuda.empty_cache(), set_per_process_memory_fraction() and "
            "Tensor.record_stream() do not reach gpumem, and out of memory is raised as a "
            "RuntimeError, not torch.OutOfMemoryError. Use gpumem.empty_cache() / "
            "gpumem.set_capacity().")
        path = _native.find_library()
        # The throwing alloc: PyTorch would use a NULL from gpumem_alloc unchecked.
        alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "gpumem_alloc_or_throw",
                                                         "gpumem_free")
        try:
            torch.cuda.memory.change_current_allocator(alloc)
        except RuntimeError as e:
            raise InstallError(
                f"gpumem must be installed before PyTorch's CUDA allocator is first used ({e}). "
                "Fix: call gpumem.install() right after `import torch`, or start the program "
                "with `gpumem run -- python ...` / GPUMEM=1.") from e
    _watch_cuda_in_forked_children(torch)
    _watch_training(torch, False)
    _installed = True


def _watch_cuda_in_forked_children(torch):
    """DataLoader workers (fork) that touch CUDA: PyTorch refuses in torch.cuda's lazy init,
    before any driver call the CUPTI tracer could see. Wrap that init so that gpumem says
    what happened and how to fix it, on stderr and in a trace of the child's own; PyTorch's
    own error follows unchanged."""
    cuda = torch.cuda
    if getattr(cuda, "_gpumem_fork_watch", False) or not hasattr(cuda, "_is_in_bad_fork"):
        return
    original = cuda._lazy_init

    def _lazy_init():
        if cuda._is_in_bad_fork():
            _native.lib().gpumem_note_cuda_in_forked_child(
                b"torch.cuda lazy init, e.g. a tensor created on the GPU in a DataLoader worker")
        return original()

    cuda._lazy_init = _lazy_init
    cuda._gpumem_fork_watch = True


def installed():
    return _installed


def stats(device=None):
    """gpumem's figures for `device` as a dict of ints. These are what
    torch.cuda.memory_stats() cannot report under a pluggable allocator.

    Every function here that takes a device follows PyTorch: None (the default) is the
    current device (torch.cuda.current_device() once torch is imported and CUDA is
    initialized, else device 0), and an int, 'cuda:1' or a torch.device names one;
    -1 means every device started so far where the function takes it."""
    s = _native.GpumemStats()
    _native.lib().gpumem_stats(_device.index(device), s)
    return {name: getattr(s, name) for name, _ in _native.GpumemStats._fields_}


def memory_summary(device=None):
    return _native.text(_native.lib().gpumem_memory_summary, _device.index(device))


def snapshot(device=None):
    """The figures and the backend's counters (mapped bytes, page creates, ...) as a dict."""
    return json.loads(_native.text(_native.lib().gpumem_snapshot_json, _device.index(device)))


def last_oom(device=None):
    return _native.text(_native.lib().gpumem_last_oom, _device.index(device))


def step():
    """Marks the end of a training step; returns the step count. Optional: once
    installed or profiling, each optimizer step marks one; a program that calls this keeps
    its own marks instead (gpumem/_steps.py)."""
    return _steps.marker().on_explicit_step()


def trace_events():
    """Events recorded into the trace (GPUMEM_TRACE) so far, 0 without one. Each is in
    the file when its allocation returns: even a kill -9 right after this call leaves
    a trace that reads back with at least this many events."""
    return _native.lib().gpumem_trace_events()


def pause_trace(paused=True):
    """Stops (True) or resumes (False) recording blocks into the trace: a block allocated
    while paused is left out, its free included; frees of blocks allocated while recording,
    maps and steps are still recorded. For measuring what recording costs within one run
    (tests/gpu/overhead_inprocess.sh); a report of a paused stretch misses its blocks."""
    _native.lib().gpumem_trace_pause(1 if paused else 0)


def empty_cache(device=None):
    _native.lib().gpumem_empty_cache(_device.index(device))


def set_capacity(nbytes, device=None):
    index = _device.index(device)
    if _native.lib().gpumem_set_capacity(int(nbytes), index) != 0:
        raise ValueError(_native.text(_native.lib().gpumem_last_error))
    _capacity.record(index, nbytes, _capacity.SOURCE_SET_CAPACITY)


def reset_peak_stats(device=None):
    _native.lib().gpumem_reset_peaks(_device.index(device))


def backend(device=None):
    return _native.lib().gpumem_backend_name(_device.index(device)).decode()
