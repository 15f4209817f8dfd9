"""The memory cap in the trace, in both modes: each device's total memory once CUDA is up
(profile-only mode; gpumem's allocator records its own cap when a device starts), and
every torch.cuda.set_per_process_memory_fraction call, which reaches the trace through
nothing else in profile-only mode."""
from . import _device, _native

# hooks/gpumem_trace.h: where a cap came from.
SOURCE_DEVICE_TOTAL = 1
SOURCE_MEMORY_FRACTION = 3
SOURCE_SET_CAPACITY = 4


def record(device, nbytes, source, lib=None):
    _native.call_optional("gpumem_trace_capacity", int(device), int(nbytes), int(source),
                          library=lib)


def record_device_totals(torch, lib=None):
    for d in range(torch.cuda.device_count()):
        record(d, torch.cuda.get_device_properties(d).total_memory, SOURCE_DEVICE_TOTAL, lib)


def watch_memory_fraction(torch, lib=None):
    """Wraps torch.cuda.set_per_process_memory_fraction (once) so each call is recorded."""
    cuda = torch.cuda
    original = getattr(cuda, "set_per_process_memory_fraction", None)
    if original is None or getattr(original, "_gpumem_wrapped", False):
        return False

    def set_per_process_memory_fraction(fraction, device=None):
        result = original(fraction, device)
        index = _device.index(device, torch)
        total = cuda.get_device_properties(index).total_memory
        record(index, int(fraction * total), SOURCE_MEMORY_FRACTION, lib)
        return result

    set_per_process_memory_fraction._gpumem_wrapped = True
    set_per_process_memory_fraction.__doc__ = original.__doc__
    cuda.set_per_process_memory_fraction = set_per_process_memory_fraction
    memory = getattr(cuda, "memory", None)
    if memory is not None and getattr(memory, "set_per_process_memory_fraction", None) is original:
        memory.set_per_process_memory_fraction = set_per_process_memory_fraction
    return True
