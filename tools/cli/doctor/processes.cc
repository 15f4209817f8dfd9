#include "tools/cli/doctor/processes.h"

#include <fstream>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "profiler/nvml.h"
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

std::optional<ProcessList> FromNvml() {
  const NvmlCalls* nvml = LoadedNvml();
  unsigned count = 0;
  if (nvml == nullptr || nvml->device_count(&count) != 0) return std::nullopt;
  ProcessList list{true, "NVML", {}};
  for (unsigned i = 0; i < count; ++i) {
    NvmlCalls::Device device = nullptr;
    char uuid[96] = {};
    if (nvml->handle_by_index(i, &device) != 0 || nvml->uuid(device, uuid, sizeof uuid) != 0) {
      continue;
    }
    const std::optional<std::vector<ProcessBytes>> listed = RunningProcesses(*nvml, device);
    for (const ProcessBytes& p : listed.value_or(std::vector<ProcessBytes>{})) {
      list.processes.push_back({uuid, static_cast<long>(p.pid), ProcessName(p.pid), p.bytes});
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
