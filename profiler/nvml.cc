#include "profiler/nvml.h"

#include <dlfcn.h>

namespace gpumem {
namespace {

constexpr int kNvmlSuccess = 0;
constexpr int kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;

// nvmlProcessInfo_t (the _v2 and _v3 calls fill the same layout).
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

template <typename Fn>
void Find(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
}

std::optional<NvmlCalls> Load() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  int (*init)() = nullptr;
  NvmlCalls c;
  Find(lib, "nvmlInit_v2", &init);
  Find(lib, "nvmlDeviceGetCount_v2", &c.device_count);
  Find(lib, "nvmlDeviceGetHandleByIndex_v2", &c.handle_by_index);
  Find(lib, "nvmlDeviceGetHandleByPciBusId_v2", &c.handle_by_bus_id);
  Find(lib, "nvmlDeviceGetUUID", &c.uuid);
  Find(lib, "nvmlDeviceGetComputeRunningProcesses_v3", &c.running_processes);
  if (c.running_processes == nullptr) {
    Find(lib, "nvmlDeviceGetComputeRunningProcesses_v2", &c.running_processes);
  }
  if (init == nullptr || c.device_count == nullptr || c.handle_by_index == nullptr ||
      c.handle_by_bus_id == nullptr || c.uuid == nullptr || c.running_processes == nullptr ||
      init() != kNvmlSuccess) {
    return std::nullopt;
  }
  return c;
}

}  // namespace

const NvmlCalls* LoadedNvml() {
  static const std::optional<NvmlCalls> nvml = Load();
  return nvml ? &*nvml : nullptr;
}

std::optional<std::vector<ProcessBytes>> RunningProcesses(const NvmlCalls& nvml,
                                                          NvmlCalls::Device device) {
  // Asked again while the array is too small: a process may start between two calls.
  std::vector<NvmlProcessInfo> infos(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned count = static_cast<unsigned>(infos.size());
    const int rc = nvml.running_processes(device, &count, infos.data());
    if (rc == kNvmlInsufficientSize) {
      infos.resize(count + 8);
      continue;
    }
    if (rc != kNvmlSuccess) return std::nullopt;
    std::vector<ProcessBytes> out;
    for (unsigned i = 0; i < count; ++i) {
      const unsigned long long used = infos[i].used_gpu_memory;
      out.push_back({infos[i].pid, used == kNvmlValueNotAvailable ? 0 : used,
                     infos[i].gpu_instance_id});
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace gpumem
