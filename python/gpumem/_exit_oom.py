"""Out-of-memory that does not say so. When the program dies of an exception whose text is
a CUDA library's error (cuBLAS, cuDNN, cuFFT, NCCL, the CUDA runtime) while the
allocator's cache holds memory idle, the real cause is usually that the library could not
get device memory for its handle, workspace or communicator: the cache held it. Say so on
stderr with the figures and the fixes, and note it in the trace. And when the program dies
of an out-of-memory error of its own, note that in the trace: the report then takes the
OOM before it for the one that ended the run, though other threads went on allocating and
stepping while the error reached the top. Installed by install() and profile(); chained
to the hooks already in place (sys.excepthook, threading.excepthook)."""
import sys
import threading

from . import _native

# The trace note of a death by an out-of-memory error (profiler/trace_format.h,
# kDiedOfOomNote), followed by ": " and the error's first line.
DIED_OF_OOM_NOTE = "gpumem: the program died of an out-of-memory error"

# What the libraries print when their own device allocation failed.
MARKERS = ("CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_NOT_INITIALIZED",
           "CUDNN_STATUS_INTERNAL_ERROR", "CUDNN_STATUS_ALLOC_FAILED",
           "CUDNN_STATUS_NOT_INITIALIZED", "CUFFT_ALLOC_FAILED", "CUFFT_INTERNAL_ERROR",
           "NCCL error", "unhandled cuda error", "CUDA error: out of memory",
           "cudaErrorMemoryAllocation")

# An NCCL error that reports another rank's failure, not this process's memory.
REMOTE = ("remote process exited", "ncclRemoteError")

FIXES = (
    "call torch.cuda.empty_cache() after catching an out-of-memory (a batch-size finder's "
    "tries leave the cache full)",
    "make handles and communicators before filling memory: one validation batch and one "
    "collective before the finder or the first big batch",
    "leave a reserve for the libraries with torch.cuda.set_per_process_memory_fraction "
    "(e.g. 0.95)",
    "or run under gpumem's allocator (`gpumem run`), which keeps a reserve free for them "
    "(GPUMEM_HEADROOM)")


def _chain(exc):
    """The exception, then its cause or context, and so on."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def library_error(exc):
    """The marker an exception's text (or its cause's) names, else None."""
    for e in _chain(exc):
        text = str(e)
        for marker in MARKERS:
            if marker in text:
                return marker
    return None


def remote_error(exc):
    """Whether the exception is NCCL saying another rank failed (or the network did)."""
    return any(r in str(e) for e in _chain(exc) for r in REMOTE)


def _outside_leak(torch):
    """The verdict's lines where a library's memory outside the allocator (NCCL's with a
    process group made each step) grew step by step, as the CUPTI tracer counted it; ""
    where it did not, or cannot be told."""
    try:
        fn = getattr(_native.lib(), "gpumem_outside_leak", None)  # absent from older builds
        return _native.text(fn, torch.cuda.current_device()) if fn is not None else ""
    except Exception:  # the process is dying: say what can be said
        return ""


def out_of_memory(exc):
    """The out-of-memory error in the exception's chain (torch.OutOfMemoryError, or the
    RuntimeError "CUDA out of memory." that gpumem's allocator raises without
    libgpumem_torch), else None."""
    for e in _chain(exc):
        if type(e).__name__ == "OutOfMemoryError" or str(e).startswith("CUDA out of memory"):
            return e
    return None


def _mib(n):
    return "%.1f MiB" % (n / 1048576.0)


def _figures(torch, profile_mode):
    """(idle bytes, caught OOMs so far, driver free bytes or None) of the current device."""
    idle, ooms, free = 0, 0, None
    try:
        if profile_mode:
            s = torch.cuda.memory_stats()
            idle = s.get("reserved_bytes.all.current", 0) - s.get("allocated_bytes.all.current", 0)
            ooms = s.get("num_ooms", 0)
        else:
            st = _native.GpumemStats()
            _native.lib().gpumem_stats(-1, st)
            idle, ooms = st.reserved_bytes - st.allocated_bytes, st.oom_count
    except Exception:  # the process is dying: say what can be said
        pass
    try:
        free = torch.cuda.mem_get_info()[0]
    except Exception:
        pass
    return max(idle, 0), ooms, free


def explanation(exc, torch, profile_mode):
    """The lines to print for `exc`, or None when it is not a library's CUDA error."""
    marker = library_error(exc)
    if marker is None:
        return None
    if remote_error(exc):
        return ("gpumem: NCCL says another rank exited (or the network failed): that rank's "
                "error ended the job, not this rank's memory; its lines above or its own log "
                "say why.\n")
    idle, ooms, free = _figures(torch, profile_mode)
    allocator = "PyTorch's caching allocator" if profile_mode else "gpumem's allocator"
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    lines = ["gpumem: this is an out-of-memory: %s (%s) is what a CUDA library says when it "
             "cannot get device memory for its handle, workspace or buffers." % (marker, first),
             "gpumem:   %s held %s idle (reserved but not allocated)%s; the driver had %s free."
             % (allocator, _mib(idle),
                ", kept since the %d out-of-memory error%s the program caught" % (ooms, "" if ooms == 1 else "s")
                if ooms else "",
                _mib(free) if free is not None else "an unknown amount")]
    leak = _outside_leak(torch)
    if leak:
        return "\n".join(lines) + "\n" + leak
    lines.append("gpumem:   fix: " + "; ".join(FIXES) + ".")
    return "\n".join(lines) + "\n"


def _note(text):
    try:
        _native.call_optional("gpumem_trace_note", -1, text.encode("utf-8", "replace"))
    except Exception:  # the process is dying: a note it cannot write is no reason to fail
        pass


def _say(exc, torch, profile_mode):
    text = explanation(exc, torch, profile_mode)
    if text is None:
        return
    sys.stderr.write(text)
    _note(text)


def _note_death_by_oom(exc):
    """A library's error is told apart (_say): an OOM the program caught before it, in the
    error's context, did not end the run."""
    oom = out_of_memory(exc) if library_error(exc) is None else None
    if oom is not None:
        said = str(oom).strip()
        _note("%s: %s" % (DIED_OF_OOM_NOTE, said.splitlines()[0][:200] if said else ""))


def install(torch, profile_mode):
    """Chains the explanation in front of the exception hooks in place (once)."""
    if getattr(sys.excepthook, "_gpumem", False):
        return
    previous = sys.excepthook

    def excepthook(kind, exc, tb):
        _say(exc, torch, profile_mode)
        _note_death_by_oom(exc)  # the main thread's: the program dies of it
        previous(kind, exc, tb)

    excepthook._gpumem = True
    sys.excepthook = excepthook
    previous_thread = threading.excepthook

    def thread_excepthook(args):
        _say(args.exc_value, torch, profile_mode)
        previous_thread(args)

    threading.excepthook = thread_excepthook
