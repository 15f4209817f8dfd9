// The calling thread's return addresses, cheaply: no symbolization here (the writer does
// that once per unique frame, profiler/stack_table.h).
#pragma once

#include <cstddef>

#include "profiler/stack_table.h"

namespace gpumem {

// Fills `out` with up to `max` frames, innermost first, leaving out this function and the
// `skip` frames above it. Returns the number of frames.
std::size_t CaptureNativeStack(RawFrame* out, std::size_t max, std::size_t skip);

// An unwinder to use instead of glibc's backtrace(): fills `pcs` with up to `max` return
// addresses of the calling thread, innermost first, and returns how many. libgpumem_torch
// installs PyTorch's own (torch::unwind, which caches what it learns of each code
// address, where backtrace() walks the unwind tables anew every time). Null: backtrace().
using NativeUnwinder = std::size_t (*)(void** pcs, std::size_t max);
void SetNativeUnwinder(NativeUnwinder unwinder);

}  // namespace gpumem
