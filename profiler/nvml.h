// NVML (libnvidia-ml.so.1, which ships with the driver) through dlopen: never linked, so
// gpumem builds and runs where it is missing. Loading it never initializes CUDA.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace gpumem {

struct ProcessBytes {
  std::uint32_t pid = 0;
  std::uint64_t bytes = 0;
  // The MIG instance it runs in (NVML's gpuInstanceId; all ones without MIG): processes of
  // other instances do not share this one's memory.
  std::uint32_t gpu_instance = ~0u;
};

// NVML's calls, as function pointers so that a test can stand in for the library. Each
// returns an nvmlReturn_t: 0 success.
struct NvmlCalls {
  using Device = void*;
  int (*device_count)(unsigned* count) = nullptr;
  int (*handle_by_index)(unsigned index, Device* device) = nullptr;
  int (*handle_by_bus_id)(const char* bus_id, Device* device) = nullptr;
  int (*uuid)(Device device, char* out, unsigned length) = nullptr;
  // nvmlDeviceGetComputeRunningProcesses (_v3, else _v2: one layout): 7 when the array is
  // too small, `count` then saying how many there are.
  int (*running_processes)(Device device, unsigned* count, void* infos) = nullptr;
};

// The library's calls, loaded and initialized on the first use; null where it is missing,
// lacks one of them or does not initialize.
const NvmlCalls* LoadedNvml();

// Every process with memory on `device`, as NVML lists them (bytes NVML may not show,
// e.g. another container's, as 0); nullopt where the call fails.
std::optional<std::vector<ProcessBytes>> RunningProcesses(const NvmlCalls& nvml,
                                                          NvmlCalls::Device device);

}  // namespace gpumem
