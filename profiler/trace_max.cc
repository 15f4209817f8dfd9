#include "profiler/trace_max.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "profiler/byte_size.h"
#include "profiler/trace_ring.h"

namespace gpumem {

absl::StatusOr<std::uint64_t> ParseTraceMax(const char* value) {
  if (value == nullptr || *value == '\0') return 0;
  absl::StatusOr<std::uint64_t> bytes = ParseBytes(value);
  if (!bytes.ok() || *bytes < TraceRingOptions::kMinBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        kTraceMaxVariable, "='", value, "': expected a size of at least 16M, such as 256M or 2G"));
  }
  return *bytes;
}

std::uint64_t CuptiTraceMax(std::uint64_t trace_max) {
  if (trace_max == 0) return 0;
  return std::max(trace_max / kCuptiTraceShare, TraceRingOptions::kMinBytes);
}

}  // namespace gpumem
