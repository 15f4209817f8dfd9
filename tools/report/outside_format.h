// The outside-allocator figures as JSON, as terminal lines, and as the part of an OOM
// verdict that says who held the device's memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nlohmann/json.hpp"
#include "tools/report/outside_allocator.h"

namespace gpumem::report {

// The `outside_allocator` object of `gpumem report --json` (docs/report.md).
nlohmann::json OutsideToJson(const OutsideAllocator& o);

// "Memory outside the allocator ..." and one line per moment; always says something.
std::string FormatOutside(const OutsideAllocator& o);

// "the allocator held 70.1 GiB, NCCL 2.3 GiB, other 1.1 GiB of 79.2 GiB" at the end
// moment; empty where nothing outside the allocator is known there.
std::string OutsideVerdictPart(const OutsideAllocator& o);

// The device memory outside the allocator at the peak: what the driver said was in use
// less the allocator's reserved bytes, else what CUPTI saw; nullopt where neither is known.
std::optional<std::uint64_t> OutsideAtPeak(const OutsideAllocator& o);

}  // namespace gpumem::report
