// Which library asked the driver for a block of device memory outside the allocator, read
// from a trace's stacks (tools/report/library_kind.h). Allocations recorded by the CUPTI
// tracer carry an API frame innermost ("[cuda-driver]" / "[cuda-runtime]"); that is what
// marks them as outside.
#pragma once

#include <cstdint>

#include "tools/report/library_kind.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

// True when the stack's innermost frame is a CUDA API frame: recorded by the CUPTI tracer.
bool IsDriverCall(const trace::Trace& trace, std::uint32_t stack);

// The library of a recorded driver call's stack (kUnknown without native frames).
OutsideLibrary LibraryOfStack(const trace::Trace& trace, std::uint32_t stack);

}  // namespace gpumem::report
