// Units and streams the allocator tests share: the simulated device's 2 MiB pages (the
// granularity SimBackend models unless a test asks for another) and two streams.
#pragma once

#include <cstddef>

#include "allocator/backend.h"

namespace gpumem::test_units {

inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr std::size_t kGiB = std::size_t{1} << 30;
inline constexpr std::size_t kPage = 2 * kMiB;
inline constexpr StreamId kS1 = 1;
inline constexpr StreamId kS2 = 2;

}  // namespace gpumem::test_units
