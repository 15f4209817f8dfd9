// The driver's own figure of a device's memory (cuMemGetInfo_v2 on the current context):
// what every library, the CUDA context and the allocator hold together. Read only where
// the driver is already loaded and a context is current; it never initializes CUDA.
#pragma once

#include <cstdint>
#include <optional>

namespace gpumem {

struct DriverMemory {
  std::int32_t device = 0;
  std::uint64_t free = 0;
  std::uint64_t total = 0;
  std::uint64_t used() const { return total > free ? total - free : 0; }
};

// The current context's device and its free and total bytes; nullopt where the driver is
// not loaded, no context is current, or a call fails.
std::optional<DriverMemory> SampleDriverMemory();

}  // namespace gpumem
