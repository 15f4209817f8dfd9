// Sizes no device has are refused when a trace is read, so that no sum a report or a
// replay makes can wrap: each size is at most 2^50 bytes (1 PiB, far above any GPU), a
// block's end is inside the 64-bit address space, and the sizes of all allocations (and
// of all segments) together stay below 2^62, so totals over a whole run fit even a
// signed 64-bit number.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

inline constexpr std::uint64_t kMaxDeviceBytes = std::uint64_t{1} << 50;
inline constexpr std::uint64_t kMaxTotalBytes = std::uint64_t{1} << 62;

// An error naming the file, the event (its index and action) and the size at fault.
absl::Status CheckPlausibleSizes(const Trace& trace);

}  // namespace gpumem::trace
