// Every allocation policy by its command-line name, so replay, benchmarks and the C ABI
// choose one the same way.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "allocator/backend.h"
#include "allocator/device_allocator.h"

namespace gpumem {

// Settings a policy may take; the others ignore them.
struct PolicySettings {
  // gpumem: its unit of physical memory and mapping (CachingAllocatorOptions::page_bytes,
  // GPUMEM_PAGE_SIZE); 0: the backend's granularity.
  std::size_t page_bytes = 0;
};

// "gpumem", "pytorch", "pytorch-expandable". The allocator uses `backend`, which must
// outlive it. NotFound for an unknown name, with the known names in the message.
absl::StatusOr<std::unique_ptr<DeviceAllocator>> MakePolicy(absl::string_view name,
                                                            Backend& backend,
                                                            const PolicySettings& settings = {});

// The names MakePolicy accepts, in a stable order.
std::vector<std::string> PolicyNames();

}  // namespace gpumem
