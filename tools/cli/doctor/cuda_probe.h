// What the CUDA driver says about this machine, asked through libcuda.so.1 loaded with
// dlopen. It has its own small function table rather than allocator/cuda_driver.h's: that
// one refuses a machine with no device and has no cuDriverGetVersion, and the doctor must
// describe exactly those machines. Plain C types, so it builds without the CUDA toolkit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpumem::cli::doctor {

struct GpuInfo {
  int ordinal = 0;         // CUDA's index, after CUDA_VISIBLE_DEVICES
  std::string name;
  std::string uuid;        // "GPU-xxxxxxxx-...", as nvidia-smi and NVML print it
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::string memory_error;  // why free memory is unknown (no context), else empty
  int vmm = -1;            // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED; -1 unknown
};

struct CudaProbe {
  bool loaded = false;
  std::string load_error;   // why libcuda.so.1 did not load
  int driver_version = 0;   // cuDriverGetVersion: 12040 is CUDA 12.4; 0 unknown
  int init_result = -1;     // cuInit's CUresult (0 success); -1 not called
  std::string init_error;   // its name, e.g. CUDA_ERROR_NO_DEVICE
  std::vector<GpuInfo> gpus;
};

// Loads the driver (GPUMEM_DOCTOR_LIBCUDA names another file, for tests), initializes
// it, and reads each visible device. Creates each device's primary context to read its
// free memory.
CudaProbe ProbeCuda();

}  // namespace gpumem::cli::doctor
