#include "profiler/process_memory.h"

#include <unistd.h>

#include "profiler/driver_symbol.h"

namespace gpumem {
namespace {

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
  if (nvml.handle_by_bus_id(bus_id, &device) != 0) return std::nullopt;
  const std::optional<std::vector<ProcessBytes>> listed = RunningProcesses(nvml, device);
  if (!listed) return std::nullopt;
  std::optional<std::uint32_t> own_instance;
  for (const ProcessBytes& p : *listed) {
    if (p.pid == self_pid) own_instance = p.gpu_instance;
  }
  DeviceProcesses out;
  for (const ProcessBytes& p : *listed) {
    if (p.pid == self_pid) {
      out.self = out.self.value_or(0) + p.bytes;
    } else if (!own_instance || p.gpu_instance == *own_instance) {
      out.others.push_back(p);  // under MIG, only this process's instance
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
  char bus_id[32] = {};
  if (!BusIdOf(cuda_device, bus_id, sizeof(bus_id))) return std::nullopt;
  const NvmlCalls* nvml = LoadedNvml();
  if (nvml == nullptr) return std::nullopt;
  return ProcessesOnDevice(*nvml, bus_id, static_cast<std::uint32_t>(getpid()));
}

}  // namespace gpumem
