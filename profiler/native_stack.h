// The calling thread's return addresses, cheaply: no symbolization here (the writer does
// that once per unique frame, profiler/stack_table.h).
#pragma once

#include <cstddef>

#include "profiler/stack_table.h"

namespace gpumem {

// Fills `out` with up to `max` frames, innermost first, leaving out this function and the
// `skip` frames above it. Returns the number of frames.
std::size_t CaptureNativeStack(RawFrame* out, std::size_t max, std::size_t skip);

}  // namespace gpumem
