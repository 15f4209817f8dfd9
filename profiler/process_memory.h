// Which processes hold memory on a device, by NVML: this process's bytes (its CUDA context,
// loaded kernels and every allocation) and every other process's. The driver's figure of a
// device's used memory (cuMemGetInfo) counts them all; NVML is what tells them apart, so
// that memory another process took (a DataLoader worker that made a context, another
// rank on the wrong GPU, another job) is named rather than taken for this process's.
// NVML is loaded only where the driver is already in the process; it never initializes
// CUDA.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "profiler/nvml.h"

namespace gpumem {

struct DeviceProcesses {
  std::optional<std::uint64_t> self;  // this process's bytes; nullopt: NVML does not list it
  std::vector<ProcessBytes> others;   // every other process with memory on the device
  std::uint64_t others_bytes() const {
    std::uint64_t sum = 0;
    for (const ProcessBytes& p : others) sum += p.bytes;
    return sum;
  }
};

// The processes NVML lists on the device with PCI bus id `bus_id`; `self_pid` is this
// process as NVML numbers it. nullopt where NVML cannot say.
std::optional<DeviceProcesses> ProcessesOnDevice(const NvmlCalls& nvml, const char* bus_id,
                                                 std::uint32_t self_pid);

// The same for CUDA device `cuda_device` of this process (NVML loaded and initialized
// once; nullopt where NVML or the driver is missing or a call fails).
std::optional<DeviceProcesses> SampleProcessMemory(int cuda_device);

// When to read NVML at a step end: where the driver's figure of used memory is the most
// the device has had so far. So the step with the most in use (the report's peak) always
// has its read, a steady run reads in its first steps only, and a growing one at each
// step that grows.
class ProcessReadSchedule {
 public:
  // True when due; the reading is then taken as made.
  bool Due(int device, std::uint64_t driver_used);

 private:
  std::mutex mu_;
  absl::flat_hash_map<int, std::uint64_t> most_;  // device -> the most in use so far
};

}  // namespace gpumem
