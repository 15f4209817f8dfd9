"""ctypes bindings of libgpumem.so (hooks/gpumem.h) and, where built, libgpumem_torch.so."""
import ctypes
import os

_LIB_NAME = "libgpumem.so"
_TORCH_LIB_NAME = "libgpumem_torch.so"


class GpumemStats(ctypes.Structure):
    # Field for field hooks/gpumem.h's gpumem_stats_t.
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "allocated_bytes", "peak_allocated_bytes", "reserved_bytes", "peak_reserved_bytes",
        "active_blocks", "alloc_count", "free_count", "oom_count", "stitch_count",
        "trim_count", "largest_free_bytes", "capacity_bytes", "device_total_bytes", "step")]


def _candidate_dirs():
    if os.environ.get("GPUMEM_LIB_DIR"):
        yield os.environ["GPUMEM_LIB_DIR"]
    here = os.path.dirname(os.path.abspath(__file__))
    yield here
    repo = os.path.dirname(os.path.dirname(here))
    for build in sorted(os.listdir(repo)) if os.path.isdir(repo) else []:
        if build.startswith("build"):
            yield os.path.join(repo, build, "lib")


def find_library(name=_LIB_NAME):
    """Path of `name`: $GPUMEM_LIB_DIR, this package's folder, then the repo's build*/lib."""
    for d in _candidate_dirs():
        path = os.path.join(d, name)
        if os.path.isfile(path):
            return path
    return None


_lib = None
_torch_lib = None


def lib():
    global _lib
    if _lib is None:
        path = find_library()
        if path is None:
            raise OSError(
                "gpumem: libgpumem.so not found; build it (cmake --build build --target "
                "gpumem_shared) and set GPUMEM_LIB_DIR to the folder that holds it")
        l = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        l.gpumem_alloc.restype = ctypes.c_void_p
        l.gpumem_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        l.gpumem_free.restype = None
        l.gpumem_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                  ctypes.c_void_p]
        l.gpumem_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        l.gpumem_empty_cache.argtypes = [ctypes.c_int]
        l.gpumem_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
        l.gpumem_set_capacity.argtypes = [ctypes.c_uint64, ctypes.c_int]
        l.gpumem_stats.argtypes = [ctypes.c_int, ctypes.POINTER(GpumemStats)]
        l.gpumem_reset_peaks.argtypes = [ctypes.c_int]
        for fn in (l.gpumem_memory_summary, l.gpumem_snapshot_json, l.gpumem_last_oom):
            fn.restype = ctypes.c_size_t
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        for fn in (l.gpumem_config_error, l.gpumem_last_error):
            fn.restype = ctypes.c_size_t
            fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        l.gpumem_step.restype = ctypes.c_uint64
        l.gpumem_tracing.restype = ctypes.c_int
        l.gpumem_profile_start.restype = ctypes.c_int
        l.gpumem_trace_events.restype = ctypes.c_uint64
        l.gpumem_trace_events.argtypes = []
        l.gpumem_trace_pause.restype = None
        l.gpumem_trace_pause.argtypes = [ctypes.c_int]
        l.gpumem_note_cuda_in_forked_child.restype = None
        l.gpumem_note_cuda_in_forked_child.argtypes = [ctypes.c_char_p]
        l.gpumem_backend_name.restype = ctypes.c_char_p
        l.gpumem_backend_name.argtypes = [ctypes.c_int]
        if hasattr(l, "gpumem_trace_capacity"):  # hooks/gpumem_trace.h
            l.gpumem_trace_capacity.restype = ctypes.c_int
            l.gpumem_trace_capacity.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_int]
            l.gpumem_trace_step_source.restype = ctypes.c_int
            l.gpumem_trace_step_source.argtypes = [ctypes.c_int]
        if hasattr(l, "gpumem_trace_check"):
            l.gpumem_trace_check.restype = ctypes.c_size_t
            l.gpumem_trace_check.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        if hasattr(l, "gpumem_trace_note"):
            l.gpumem_trace_note.restype = ctypes.c_int
            l.gpumem_trace_note.argtypes = [ctypes.c_int, ctypes.c_char_p]
        _lib = l
    return _lib


def torch_lib():
    """libgpumem_torch.so (built where CMake found Torch), or None."""
    global _torch_lib
    if _torch_lib is None:
        path = find_library(_TORCH_LIB_NAME)
        if path is None:
            return None
        lib()  # its dependency, loaded from the same folder first
        l = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        l.gpumem_torch_install.restype = ctypes.c_int
        l.gpumem_torch_install.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        l.gpumem_torch_profile.restype = ctypes.c_int
        l.gpumem_torch_profile.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        l.gpumem_torch_profile_user_history.restype = ctypes.c_int
        l.gpumem_torch_profile_user_history.argtypes = [
            ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p,
            ctypes.c_size_t]
        _torch_lib = l
    return _torch_lib


def text(fn, *args, size=4096):
    """Calls a gpumem text function (snprintf rules: it returns the bytes the whole text
    needs) and returns its whole text. Asked again until the text fits: other threads
    allocating meanwhile can lengthen its figures between one call and the next, and a
    cut JSON snapshot does not parse."""
    while True:
        buf = ctypes.create_string_buffer(size)
        need = fn(*args, buf, size)
        if need <= size:
            return buf.value.decode("utf-8", "replace")
        size = need + 256
