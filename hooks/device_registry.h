// One allocator per device, started on first use and kept for the life of the process
// (never destroyed: PyTorch frees tensors from static destructors after the CUDA runtime
// may have shut down, and a torn-down allocator there would crash the exit).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "allocator/device_allocator.h"
#include "hooks/backend_factory.h"
#include "hooks/config.h"

namespace gpumem::hooks {

inline constexpr int kMaxDevices = 64;

struct DeviceState {
  int device = 0;
  StartedBackend backend;
  std::unique_ptr<DeviceAllocator> allocator;
  // The cap in force. The policy (CachingAllocator) is thread-safe behind its own lock,
  // so calls into it take no lock here; this one guards only cap changes.
  std::atomic<std::uint64_t> capacity{0};
  // The page asked of the allocator (GPUMEM_PAGE_SIZE, or the device's default); the
  // allocator rounds it up to the backend's granularity.
  std::size_t page_bytes = 0;
  std::mutex mu;
};

// The configuration read at first use; an error (bad GPUMEM_* value) stays for the process.
const absl::StatusOr<Config>& ProcessConfig();

// The device's state, started on first call. Errors (bad configuration, no device) are
// returned every time without retrying the start.
absl::StatusOr<DeviceState*> GetDevice(int device);
// Started devices by number. Outside the registry so that the allocation path finds a
// started device with one load, inline; constant-initialized, never destroyed.
extern std::atomic<DeviceState*> g_started_devices[kMaxDevices];

// The device's state if it has started, else nullptr. Never starts one.
inline DeviceState* StartedDevice(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_started_devices[device].load(std::memory_order_acquire);
}
// The started device if exactly one has started, else nullptr: one load in the common
// one-device case.
DeviceState* SoleStartedDevice();
// Calls `fn` for every started device.
void ForEachStartedDevice(const std::function<void(DeviceState&)>& fn);

// A cap asked for before the device started waits here and is applied at its start.
void SetPendingCapacity(int device, std::uint64_t bytes);
void SetPendingFraction(int device, double fraction);

// Tests only: destroys every device (no block may be live) and re-reads the
// environment on next use.
void ResetRegistryForTesting();

}  // namespace gpumem::hooks
