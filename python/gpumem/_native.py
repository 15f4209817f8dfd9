"""ctypes bindings of libgpumem.so (hooks/gpumem.h) and, where built, libgpumem_torch.so."""
import ctypes
import os
from ctypes import POINTER, c_char_p, c_double, c_int, c_size_t, c_ssize_t, c_uint64, c_void_p

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

_TEXT_OUT = ([c_int, c_char_p, c_size_t], c_size_t)  # (device, buf, len) -> len
_ERROR_OUT = ([c_char_p, c_size_t], c_size_t)  # (buf, len) -> len
# name: (argtypes, restype), hooks/gpumem.h's declarations; ... leaves that part as
# ctypes's default (an int result, arguments unchecked).
_SIGNATURES = {
    "gpumem_alloc": ([c_ssize_t, c_int, c_void_p], c_void_p),
    "gpumem_free": ([c_void_p, c_ssize_t, c_int, c_void_p], None),
    "gpumem_record_stream": ([c_void_p, c_int, c_void_p], ...),
    "gpumem_empty_cache": ([c_int], ...),
    "gpumem_set_memory_fraction": ([c_double, c_int], ...),
    "gpumem_set_capacity": ([c_uint64, c_int], ...),
    "gpumem_stats": ([c_int, POINTER(GpumemStats)], ...),
    "gpumem_reset_peaks": ([c_int], ...),
    "gpumem_memory_summary": _TEXT_OUT,
    "gpumem_snapshot_json": _TEXT_OUT,
    "gpumem_last_oom": _TEXT_OUT,
    "gpumem_config_error": _ERROR_OUT,
    "gpumem_last_error": _ERROR_OUT,
    "gpumem_step": (..., c_uint64),
    "gpumem_tracing": (..., c_int),
    "gpumem_profile_start": (..., c_int),
    "gpumem_trace_events": ([], c_uint64),
    "gpumem_trace_pause": ([c_int], None),
    "gpumem_note_cuda_in_forked_child": ([c_char_p], None),
    "gpumem_backend_name": ([c_int], c_char_p),
}
# hooks/gpumem_trace.h, absent from older builds.
_OPTIONAL_SIGNATURES = {
    "gpumem_trace_capacity": ([c_int, c_uint64, c_int], c_int),
    "gpumem_trace_step_source": ([c_int], c_int),
    "gpumem_trace_steps_coming": ([], None),
    "gpumem_trace_loop_thread": ([], c_int),
    "gpumem_trace_check": ([c_char_p, c_size_t], c_size_t),
    "gpumem_trace_note": ([c_int, c_char_p], c_int),
    "gpumem_trace_graph_pool": ([c_int, c_int, c_uint64, c_uint64], c_int),
    "gpumem_outside_leak": _TEXT_OUT,
}


def _declare(library, name, signature):
    argtypes, restype = signature
    fn = getattr(library, name)
    if argtypes is not ...:
        fn.argtypes = argtypes
    if restype is not ...:
        fn.restype = restype


def lib():
    global _lib
    if _lib is None:
        path = find_library()
        if path is None:
            raise OSError(
                "gpumem: libgpumem.so not found; build it (cmake --build build --target "
                "gpumem_shared) and set GPUMEM_LIB_DIR to the folder that holds it")
        loaded = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        for name, signature in _SIGNATURES.items():
            _declare(loaded, name, signature)
        for name, signature in _OPTIONAL_SIGNATURES.items():
            if hasattr(loaded, name):
                _declare(loaded, name, signature)
        _lib = loaded
    return _lib


def call_optional(name, *args, library=None):
    """Calls hooks/gpumem_trace.h's function `name` of `library` (libgpumem.so by
    default) and returns what it returns; None where this build lacks it (older builds
    lack some)."""
    fn = getattr(library if library is not None else lib(), name, None)
    return fn(*args) if fn is not None else None


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
