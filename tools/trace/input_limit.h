// How many bytes a reader takes from one input, once decompressed: a gzip bomb or an
// endless device (/dev/zero) is refused at the limit instead of filling memory.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gpumem::trace {

// The default: larger than any trace we have seen, small enough to fit a workstation.
inline constexpr std::uint64_t kDefaultMaxInputBytes = std::uint64_t{4} << 30;
// The variable that overrides it: bytes, or a number with K, M, G or T (binary units,
// "iB" or "B" after it optional), e.g. GPUMEM_MAX_INPUT=16GiB.
inline constexpr const char* kMaxInputVariable = "GPUMEM_MAX_INPUT";

// The limit in force; an error names the variable when its value is not a size.
absl::StatusOr<std::uint64_t> MaxInputBytes();

// "4 GiB", "512 MiB", "1000 bytes": the limit as an error message says it.
std::string DescribeBytes(std::uint64_t bytes);

}  // namespace gpumem::trace
