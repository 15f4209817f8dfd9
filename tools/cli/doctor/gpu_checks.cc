// The driver-level checks, from what ProbeCuda() and ListGpuProcesses() found.
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/cli/doctor/checks.h"

namespace gpumem::cli::doctor {
namespace {

constexpr int kCudaErrorNoDevice = 100;
constexpr int kCudaErrorSystemDriverMismatch = 803;
constexpr double kBusyShare = 0.85;  // below this share free, a GPU is not a clean start

std::string Version(int driver_version) {
  return absl::StrFormat("%d.%d", driver_version / 1000, driver_version % 1000 / 10);
}

std::string VisibleDevices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v == nullptr ? "CUDA_VISIBLE_DEVICES unset: all GPUs"
                      : absl::StrCat("CUDA_VISIBLE_DEVICES='", v, "'");
}

bool Usable(const CudaProbe& probe) { return probe.loaded && !probe.gpus.empty(); }

}  // namespace

Check DriverCheck(const CudaProbe& probe, const TorchFacts& torch) {
  if (!probe.loaded) {
    return MakeCheck("driver", Status::kSkipped, "no NVIDIA driver: " + probe.load_error,
                     "install the NVIDIA driver, or in a container add the GPUs (docker run "
                     "--gpus all)");
  }
  std::string driver = Version(probe.driver_version);
  if (!torch.cuda.has_value()) {
    return MakeCheck("driver", Status::kOk,
                     absl::StrCat("the NVIDIA driver supports CUDA up to ", driver,
                                  " (no CUDA build of torch found to compare with)"));
  }
  std::vector<std::string> parts = absl::StrSplit(*torch.cuda, '.');
  int major = 0, minor = 0;
  if (parts.empty() || !absl::SimpleAtoi(parts[0], &major) ||
      (parts.size() > 1 && !absl::SimpleAtoi(parts[1], &minor))) {
    return MakeCheck("driver", Status::kWarn,
                     absl::StrCat("cannot read torch.version.cuda '", *torch.cuda, "'"));
  }
  int needed = major * 1000 + minor * 10;
  std::string both = absl::StrCat("driver supports CUDA ", driver, ", torch was built with CUDA ",
                                  *torch.cuda);
  Check check = MakeCheck("driver", Status::kOk, both);
  if (probe.driver_version / 1000 < major) {
    check.status = Status::kFail;
    check.finding = both + ": torch cannot start CUDA (\"driver is too old\")";
    check.fix = absl::StrCat("update the NVIDIA driver to one for CUDA ", major,
                             ", or install a torch built for CUDA ", driver,
                             " or older (pip index https://download.pytorch.org/whl/cuXY)");
  } else if (probe.driver_version < needed) {
    check.status = Status::kWarn;
    check.finding = both + ": runs by minor-version compatibility, but kernels that need "
                           "PTX JIT or newer driver features fail";
    check.fix = absl::StrCat("update the NVIDIA driver to one for CUDA ", *torch.cuda,
                             " or newer");
  }
  check.details = {{"driver_cuda", driver}, {"torch_cuda", *torch.cuda}};
  return check;
}

Check GpusCheck(const CudaProbe& probe) {
  if (!probe.loaded) return MakeCheck("gpus", Status::kSkipped, "no NVIDIA driver (see driver)");
  if (probe.init_result != 0) {
    Check check = MakeCheck("gpus", Status::kFail,
                            absl::StrCat("cuInit failed with ", probe.init_error, " (",
                                         VisibleDevices(), ")"),
                            "check the driver with nvidia-smi; reinstall it if that fails too");
    if (probe.init_result == kCudaErrorNoDevice) {
      check.fix = "unset CUDA_VISIBLE_DEVICES or list GPUs that exist (nvidia-smi -L shows "
                  "their indices and UUIDs); in a container, add the GPUs (--gpus all)";
    } else if (probe.init_result == kCudaErrorSystemDriverMismatch) {
      check.fix = "the driver library and the kernel module differ (a driver update without "
                  "a reboot): reboot, or reload the nvidia kernel module";
    }
    return check;
  }
  std::vector<std::string> names;
  nlohmann::json list = nlohmann::json::array();
  for (const GpuInfo& g : probe.gpus) {
    names.push_back(absl::StrCat(g.ordinal, ": ", g.name));
    list.push_back({{"index", g.ordinal}, {"name", g.name}, {"uuid", g.uuid}});
  }
  Check check = MakeCheck("gpus", Status::kOk,
                          absl::StrCat(probe.gpus.size(), " GPU(s) visible (", VisibleDevices(),
                                       "): ", absl::StrJoin(names, ", ")));
  if (probe.gpus.empty()) {
    check.status = Status::kFail;
    check.finding = absl::StrCat("no GPU visible (", VisibleDevices(), ")");
    check.fix = "unset CUDA_VISIBLE_DEVICES or list GPUs that exist (nvidia-smi -L)";
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  check.details = {{"cuda_visible_devices", visible ? nlohmann::json(visible) : nullptr},
                   {"devices", list}};
  return check;
}

namespace {

// One GPU's part of the gpu_memory finding, with its JSON details; *busy when another
// process or unexplained use leaves it short of a clean start.
std::string DescribeMemory(const GpuInfo& g, const std::vector<const GpuProcess*>& holders,
                           nlohmann::json* details, bool* busy) {
  *details = {{"index", g.ordinal}, {"total_bytes", g.total_bytes},
              {"free_bytes", g.free_bytes}, {"processes", nlohmann::json::array()}};
  std::string line = absl::StrCat("GPU ", g.ordinal, ": ");
  if (!g.memory_error.empty()) {
    (*details)["error"] = g.memory_error;
    *busy = true;
    return line + g.memory_error;
  }
  absl::StrAppend(&line, Bytes(g.free_bytes), " free of ", Bytes(g.total_bytes));
  *busy = g.free_bytes < kBusyShare * g.total_bytes;
  std::vector<std::string> names;
  for (const GpuProcess* p : holders) {
    if (p->pid == getpid()) continue;  // the doctor's own context
    names.push_back(absl::StrCat("pid ", p->pid, " ", p->name,
                                 p->used_bytes ? " (" + Bytes(p->used_bytes) + ")" : ""));
    (*details)["processes"].push_back(
        {{"pid", p->pid}, {"name", p->name}, {"used_bytes", p->used_bytes}});
  }
  if (names.empty()) return line;
  *busy = true;
  return absl::StrCat(line, ", held by ", absl::StrJoin(names, ", "));
}

}  // namespace

Check GpuMemoryCheck(const CudaProbe& probe, const ProcessList& processes) {
  if (!Usable(probe)) {
    return MakeCheck("gpu_memory", Status::kSkipped, "no GPU to read memory from (see gpus)");
  }
  std::map<std::string, std::vector<const GpuProcess*>> by_gpu;
  for (const GpuProcess& p : processes.processes) by_gpu[p.gpu_uuid].push_back(&p);
  Check check = MakeCheck("gpu_memory", Status::kOk, "");
  check.details = {{"processes_source", processes.source},
                   {"devices", nlohmann::json::array()}};
  std::vector<std::string> lines;
  for (const GpuInfo& g : probe.gpus) {
    nlohmann::json d;
    bool busy = false;
    lines.push_back(DescribeMemory(g, by_gpu[g.uuid], &d, &busy));
    if (busy) check.status = Status::kWarn;
    check.details["devices"].push_back(d);
  }
  check.finding = absl::StrJoin(lines, "; ");
  if (!processes.known) absl::StrAppend(&check.finding, " (which processes: ", processes.source, ")");
  if (check.status == Status::kWarn) {
    check.fix = "stop the processes holding memory (kill PID), or pick an idle GPU with "
                "CUDA_VISIBLE_DEVICES";
  }
  return check;
}

Check VmmCheck(const CudaProbe& probe) {
  if (!Usable(probe)) return MakeCheck("vmm", Status::kSkipped, "no GPU to ask (see gpus)");
  std::vector<std::string> without;
  for (const GpuInfo& g : probe.gpus) {
    if (g.vmm != 1) without.push_back(absl::StrCat(g.ordinal));
  }
  if (without.empty()) {
    return MakeCheck("vmm", Status::kOk, "every GPU supports virtual memory management");
  }
  return MakeCheck(
      "vmm", Status::kWarn,
      absl::StrCat("no virtual memory management on GPU ", absl::StrJoin(without, ", "),
                   ": gpumem falls back to cudaMalloc segments (no defragmentation by "
                   "remapping) and PyTorch's expandable_segments is unavailable"),
      "nothing stops the job; for defragmentation run on a driver and GPU with VMM (vGPU "
      "and some virtualized setups turn it off)");
}

}  // namespace gpumem::cli::doctor
