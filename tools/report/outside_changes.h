// The changes in memory on one device that the outside-allocator figures add up: the
// allocator's reserved bytes (its segments and maps), device memory other libraries took
// through the driver (CUPTI records, by library), pinned host memory; and the driver's
// readings at step ends.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tools/trace/trace.h"

namespace gpumem::report {

inline constexpr std::uint8_t kPinnedBucket = 5;  // after the libraries
inline constexpr std::uint8_t kReservedBucket = 6;
inline constexpr std::size_t kBuckets = 7;

struct MemoryChange {
  std::int64_t time_us = 0;
  std::uint8_t bucket = 0;  // an OutsideLibrary, kPinnedBucket or kReservedBucket
  std::int64_t bytes = 0;
};

struct DriverSample {
  std::int64_t time_us = 0;
  std::uint64_t step = 0;
  std::uint64_t free = 0;
  std::optional<std::uint64_t> total;
};

struct OutsideChanges {
  std::vector<MemoryChange> changes;  // in time order
  std::vector<DriverSample> samples;  // in time order
  bool calls_recorded = false;
};

// `cupti` may be null.
// Microseconds to add to the CUPTI trace's times to put them on the main trace's clock
// (the headers' clock origins; 0 where either lacks one).
std::int64_t CuptiShiftUs(const trace::Trace& main, const trace::Trace& cupti);

OutsideChanges CollectOutsideChanges(const trace::Trace& trace, const trace::Trace* cupti,
                                     int device);

// The device's total memory as the trace recorded it (a step's driver reading, else a
// capacity record that says it is the device's total).
std::optional<std::uint64_t> DriverTotal(const trace::Trace& trace, int device);

}  // namespace gpumem::report
