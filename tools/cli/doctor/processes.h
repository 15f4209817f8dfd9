// Which processes hold memory on which GPU: nvidia-smi where it is installed, else NVML
// (libnvidia-ml.so.1 through dlopen), else unknown with the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpumem::cli::doctor {

struct GpuProcess {
  std::string gpu_uuid;  // matches GpuInfo::uuid
  long pid = 0;
  std::string name;
  std::uint64_t used_bytes = 0;  // 0 when the driver does not say (e.g. in a container)
};

struct ProcessList {
  bool known = false;
  std::string source;  // "nvidia-smi" or "NVML"; when unknown, why
  std::vector<GpuProcess> processes;
};

ProcessList ListGpuProcesses();

}  // namespace gpumem::cli::doctor
