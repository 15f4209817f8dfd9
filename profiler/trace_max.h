// GPUMEM_TRACE_MAX, read with this one parser by both recorders of a process: libgpumem.so's
// (hooks/config.cc), whose trace it bounds, and the CUPTI tracer's
// (profiler/cupti/tracer_options.h), whose companion trace is a ring of its own within
// CuptiTraceMax() (docs/profiler.md, Bounded traces).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace gpumem {

inline constexpr char kTraceMaxVariable[] = "GPUMEM_TRACE_MAX";

// The variable's value `value` (nullptr: unset): 0, one unbounded file, when unset or
// empty; else a size of at least TraceRingOptions::kMinBytes, or an error naming the
// variable, its value and what it accepts.
absl::StatusOr<std::uint64_t> ParseTraceMax(const char* value);

// The CUPTI companion's bound under GPUMEM_TRACE_MAX=`trace_max` (0: unbounded): a
// sixteenth of it, at least the smallest ring. The companion holds only other libraries'
// driver calls, a few per step, where the main trace holds every tensor.
inline constexpr std::uint64_t kCuptiTraceShare = 16;
std::uint64_t CuptiTraceMax(std::uint64_t trace_max);

}  // namespace gpumem
