// The allocation policy libgpumem.so runs on each device: gpumem's caching allocator.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "allocator/backend.h"
#include "allocator/device_allocator.h"
#include "allocator/observer.h"

namespace gpumem::hooks {

// The settings of hooks::Config that shape the allocator (CachingAllocatorOptions).
struct AllocatorSettings {
  bool stitch = true;
  bool borrow = true;
  bool background_unmap = true;
  bool thread_cache = true;
  std::uint64_t headroom_bytes = 0;
  std::size_t page_bytes = 0;  // 0: the device's granularity
};

absl::StatusOr<std::unique_ptr<DeviceAllocator>> MakeDeviceAllocator(
    Backend& backend, int device, AllocatorObserver* observer,
    const AllocatorSettings& settings = {});

}  // namespace gpumem::hooks
