#include "tools/cli/doctor/processes.h"

#include <dlfcn.h>

#include <fstream>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "tools/cli/doctor/subprocess.h"

namespace gpumem::cli::doctor {
namespace {

constexpr int kNvidiaSmiTimeoutMs = 20000;

// One "uuid, pid, name, MiB" line of --query-compute-apps; false when it is not one.
bool ParseSmiLine(absl::string_view line, GpuProcess* p) {
  std::vector<std::string> f = absl::StrSplit(line, ',');
  if (f.size() != 4) return false;
  for (std::string& s : f) s = std::string(absl::StripAsciiWhitespace(s));
  if (!absl::SimpleAtoi(f[1], &p->pid)) return false;
  p->gpu_uuid = f[0];
  p->name = f[2];
  std::uint64_t mib = 0;  // "[N/A]" in containers that hide other processes' usage
  if (absl::SimpleAtoi(f[3], &mib)) p->used_bytes = mib << 20;
  return true;
}

std::optional<ProcessList> FromNvidiaSmi() {
  std::optional<Output> out = RunCapture(
      {"nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
       "--format=csv,noheader,nounits"},
      kNvidiaSmiTimeoutMs);
  if (!out.has_value() || out->exit_code != 0) return std::nullopt;
  ProcessList list{true, "nvidia-smi", {}};
  for (absl::string_view line : absl::StrSplit(out->stdout_text, '\n', absl::SkipEmpty())) {
    GpuProcess p;
    if (ParseSmiLine(line, &p)) list.processes.push_back(p);
  }
  return list;
}

std::string ProcessName(long pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(comm, name)) return "?";  // another container's process
  return name;
}

// NVML's nvmlProcessInfo_t (v2 and v3 share this layout).
struct NvmlProcess {
  unsigned pid;
  unsigned long long used;
  unsigned gpu_instance;
  unsigned compute_instance;
};

std::optional<ProcessList> FromNvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto count_fn = reinterpret_cast<int (*)(unsigned*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle_fn =
      reinterpret_cast<int (*)(unsigned, void**)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto uuid_fn = reinterpret_cast<int (*)(void*, char*, unsigned)>(dlsym(lib, "nvmlDeviceGetUUID"));
  auto procs_fn = reinterpret_cast<int (*)(void*, unsigned*, NvmlProcess*)>(
      dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (procs_fn == nullptr) {
    procs_fn = reinterpret_cast<int (*)(void*, unsigned*, NvmlProcess*)>(
        dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2"));
  }
  unsigned count = 0;
  if (!init || !count_fn || !handle_fn || !uuid_fn || !procs_fn || init() != 0 ||
      count_fn(&count) != 0) {
    return std::nullopt;
  }
  ProcessList list{true, "NVML", {}};
  for (unsigned i = 0; i < count; ++i) {
    void* device = nullptr;
    char uuid[96] = {};
    NvmlProcess procs[256];
    unsigned n = 256;
    if (handle_fn(i, &device) != 0 || uuid_fn(device, uuid, sizeof uuid) != 0 ||
        procs_fn(device, &n, procs) != 0) {
      continue;
    }
    for (unsigned k = 0; k < n; ++k) {
      constexpr unsigned long long kNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE
      std::uint64_t used = procs[k].used == kNotAvailable ? 0 : procs[k].used;
      list.processes.push_back({uuid, static_cast<long>(procs[k].pid),
                                ProcessName(procs[k].pid), used});
    }
  }
  return list;
}

}  // namespace

ProcessList ListGpuProcesses() {
  if (std::optional<ProcessList> smi = FromNvidiaSmi()) return *smi;
  if (std::optional<ProcessList> nvml = FromNvml()) return *nvml;
  return {false, "could not tell: no working nvidia-smi on PATH and no libnvidia-ml.so.1", {}};
}

}  // namespace gpumem::cli::doctor
