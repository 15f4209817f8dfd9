// Sizes as people write them in environment variables: "512", "64K", "1.5G", "80GiB".
// In the profiler library so that libgpumem.so and the CUPTI tracer read GPUMEM_TRACE_MAX
// with the same code (profiler/trace_max.h).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumem {

// A positive size; K/M/G/T (with or without "B" or "iB", any case) are powers of 1024.
absl::StatusOr<std::uint64_t> ParseBytes(absl::string_view text);

}  // namespace gpumem
