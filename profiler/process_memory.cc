#include "profiler/process_memory.h"

#include <dlfcn.h>
#include <unistd.h>

#include "profiler/driver_symbol.h"

namespace gpumem {
namespace {

constexpr int kNvmlSuccess = 0;
constexpr int kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;

// nvmlProcessInfo_t as the _v3 call fills it.
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// Asks until the array holds every process (one may start between two calls).
std::optional<std::vector<NvmlProcessInfo>> RunningProcesses(const NvmlCalls& nvml,
                                                            NvmlCalls::Device device) {
  std::vector<NvmlProcessInfo> infos(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned count = static_cast<unsigned>(infos.size());
    const int rc = nvml.running_processes(device, &count, infos.data());
    if (rc == kNvmlSuccess) {
      infos.resize(count);
      return infos;
    }
    if (rc != kNvmlInsufficientSize) return std::nullopt;
    infos.resize(count + 8);
  }
  return std::nullopt;
}

struct LoadedNvml {
  NvmlCalls calls;
  bool ready = false;
};

// libnvidia-ml ships with the driver; loaded and initialized once, on the first sample.
LoadedNvml LoadNvml() {
  LoadedNvml out;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return out;
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  out.calls.handle_by_bus_id = reinterpret_cast<decltype(out.calls.handle_by_bus_id)>(
      dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  out.calls.running_processes = reinterpret_cast<decltype(out.calls.running_processes)>(
      dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
  out.ready = init != nullptr && out.calls.handle_by_bus_id != nullptr &&
              out.calls.running_processes != nullptr && init() == kNvmlSuccess;
  return out;
}

const LoadedNvml& Nvml() {
  static const LoadedNvml nvml = LoadNvml();
  return nvml;
}

// The CUDA device's PCI bus id ("0000:3b:00.0"), which NVML numbers devices by: CUDA's
// ordinals follow CUDA_VISIBLE_DEVICES, NVML's do not.
bool BusIdOf(int cuda_device, char* out, int len) {
  using GetBusId = int (*)(char*, int, int);
  static const auto get = reinterpret_cast<GetBusId>(DriverSymbol("cuDeviceGetPCIBusId"));
  return get != nullptr && get(out, len, cuda_device) == 0;
}

}  // namespace

std::optional<DeviceProcesses> ProcessesOnDevice(const NvmlCalls& nvml, const char* bus_id,
                                                 std::uint32_t self_pid) {
  NvmlCalls::Device device = nullptr;
  if (nvml.handle_by_bus_id(bus_id, &device) != kNvmlSuccess) return std::nullopt;
  const std::optional<std::vector<NvmlProcessInfo>> infos = RunningProcesses(nvml, device);
  if (!infos) return std::nullopt;
  DeviceProcesses out;
  for (const NvmlProcessInfo& info : *infos) {
    // Without the right to see a process's figure NVML says "not available": counted as 0.
    const std::uint64_t bytes =
        info.used_gpu_memory == kNvmlValueNotAvailable ? 0 : info.used_gpu_memory;
    if (info.pid == self_pid) {
      out.self = out.self.value_or(0) + bytes;
    } else {
      out.others.push_back({info.pid, bytes});
    }
  }
  return out;
}

bool ProcessReadSchedule::Due(int device, std::uint64_t driver_used) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, first] = most_.try_emplace(device, driver_used);
  if (first) return true;
  if (driver_used <= it->second) return false;
  it->second = driver_used;
  return true;
}

std::optional<DeviceProcesses> SampleProcessMemory(int cuda_device) {
  const LoadedNvml& nvml = Nvml();
  char bus_id[32] = {};
  if (!nvml.ready || !BusIdOf(cuda_device, bus_id, sizeof(bus_id))) return std::nullopt;
  return ProcessesOnDevice(nvml.calls, bus_id, static_cast<std::uint32_t>(getpid()));
}

}  // namespace gpumem
