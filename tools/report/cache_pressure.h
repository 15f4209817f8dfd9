// A run that lived, with its allocator's cache pressed against the cap: reserved far above
// what was ever allocated at once, and near the capacity. The pieces cached were memory
// the run's requests could not use (fragmentation): a larger batch or a longer input
// would fail with that memory free. What a report says before the OOM comes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tools/report/timeline.h"

namespace gpumem::report {

struct CachePressure {
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t capacity = 0;
  std::int32_t device = -1;  // the device pressed, in a process that drove several
  double ratio() const { return static_cast<double>(peak_reserved) / peak_allocated; }
};

// Reserved at least 1.2x the peak allocated and 90% of `capacity`, in a trace that records
// what was reserved; nullopt otherwise, or where the run died of memory (its OOM is
// explained instead).
std::optional<CachePressure> FindCachePressure(const Timeline& timeline,
                                               std::optional<std::uint64_t> capacity,
                                               bool died_of_memory);

// One paragraph: the figures, what they mean and the fix.
std::string CachePressureText(const CachePressure& p);

}  // namespace gpumem::report
