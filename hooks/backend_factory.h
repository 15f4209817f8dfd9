// Chooses and starts the backend for one device from the configuration: CUDA VMM, plain
// cudaMalloc segments, or the host simulation (GPUMEM_BACKEND=sim, for tests without a GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "allocator/backend.h"
#include "hooks/config.h"

namespace gpumem::hooks {

struct StartedBackend {
  std::unique_ptr<Backend> backend;
  std::string name;                   // "vmm", "cudamalloc", "sim"
  std::uint64_t device_total_bytes;   // what a memory fraction is a fraction of
  std::function<void(std::uint64_t)> set_capacity;
};

// Starts the backend for `device`, capped at the smaller of config.capacity and
// config.memory_fraction x the device's memory.
absl::StatusOr<StartedBackend> StartBackend(const Config& config, int device);

}  // namespace gpumem::hooks
