// gpumem doctor: checks what makes a PyTorch CUDA job fail before it starts (driver too old
// for torch's CUDA, clashing CUDA libraries, busy or hidden GPUs, a low pinned-memory
// limit, fork after CUDA) and prints the fix for each. Driver and library checks run here;
// torch-level ones in python/gpumem/doctor.py under the job's Python.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tools/cli/command.h"
#include "tools/cli/doctor/checks.h"
#include "tools/cli/doctor/python_checks.h"
#include "tools/cli/tree_paths.h"

namespace gpumem::cli {
namespace {

using doctor::Check;
using doctor::Status;

struct DoctorArgs {
  bool json = false;
  std::string python;
};

std::vector<Check> RunChecks(const DoctorArgs& args) {
  std::string lib_dir = LibDir();
  std::string script = PythonDir() + "/gpumem/doctor.py";
  // Python first: its torch facts (CUDA version, library folders) feed the checks here.
  doctor::PythonResult py = doctor::RunPythonChecks(args.python, script, lib_dir);
  doctor::CudaProbe probe = doctor::ProbeCuda();
  doctor::ProcessList processes;
  if (probe.loaded && !probe.gpus.empty()) processes = doctor::ListGpuProcesses();
  std::vector<Check> checks = {doctor::DriverCheck(probe, py.torch), doctor::GpusCheck(probe),
                               doctor::GpuMemoryCheck(probe, processes),
                               doctor::VmmCheck(probe)};
  for (Check& c : doctor::LibraryVersionChecks(py.torch)) checks.push_back(std::move(c));
  checks.push_back(doctor::PinnedMemoryCheck());
  checks.push_back(doctor::GpumemLibraryCheck(lib_dir));
  for (Check& c : py.checks) checks.push_back(std::move(c));
  checks.push_back(doctor::CuptiCheck(lib_dir));
  return checks;
}

nlohmann::json Counts(const std::vector<Check>& checks) {
  nlohmann::json counts = {{"ok", 0}, {"warn", 0}, {"fail", 0}, {"skipped", 0}};
  for (const Check& c : checks) counts[doctor::StatusName(c.status)] = counts[doctor::StatusName(c.status)].get<int>() + 1;
  return counts;
}

void PrintText(const std::vector<Check>& checks) {
  std::printf("gpumem doctor: what could stop a PyTorch CUDA job here\n");
  for (const Check& c : checks) {
    std::printf("  %-8s %-16s %s\n", doctor::StatusName(c.status), c.id.c_str(),
                c.finding.c_str());
    if (!c.fix.empty() && c.status != Status::kOk) {
      std::printf("  %-8s %-16s fix: %s\n", "", "", c.fix.c_str());
    }
  }
  nlohmann::json n = Counts(checks);
  std::printf("%d ok, %d warn, %d fail, %d skipped (skipped: could not be checked here)\n",
              n["ok"].get<int>(), n["warn"].get<int>(), n["fail"].get<int>(),
              n["skipped"].get<int>());
}

int Run(const DoctorArgs& args) {
  std::vector<Check> checks = RunChecks(args);
  bool failed = false;
  for (const Check& c : checks) failed |= c.status == Status::kFail;
  if (args.json) {
    nlohmann::json doc = {{"checks", nlohmann::json::array()}, {"summary", Counts(checks)}};
    for (const Check& c : checks) doc["checks"].push_back(doctor::ToJson(c));
    doc["exit_code"] = failed ? kExitFailure : kExitOk;
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    PrintText(checks);
  }
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void AddDoctorCommand(CLI::App& app, int* status) {
  auto args = std::make_shared<DoctorArgs>();
  CLI::App* sub = app.add_subcommand(
      "doctor",
      "Check this machine for what makes PyTorch CUDA jobs fail before they start, and say "
      "the fix for each (no GPU or torch needed: what cannot be checked is skipped)");
  sub->footer(
      "Checks: the driver against torch's CUDA version, several CUDA runtimes or CUPTI "
      "versions on the library path, the GPUs visible (CUDA_VISIBLE_DEVICES), each GPU's "
      "free memory and the processes holding it, VMM support, the pinned-memory limit "
      "(ulimit -l), whether torch, libgpumem.so, libgpumem_torch.so and CUPTI load, and "
      "whether DataLoader workers would fork after CUDA. Each check is ok, warn, fail or "
      "skipped (could not be checked here, e.g. no GPU or no torch). Exit 0 unless a check "
      "fails (1).");
  sub->add_flag("--json", args->json, "print one JSON document: checks[] (id, status, "
                                      "finding, fix, details), summary, exit_code");
  args->python = FromEnvOr("GPUMEM_DOCTOR_PYTHON", "python3");
  sub->add_option("--python", args->python,
                  "the Python that runs the job, for the torch checks (default python3 on "
                  "PATH, or GPUMEM_DOCTOR_PYTHON)");
  sub->callback([args, status] { *status = Run(*args); });
}

}  // namespace gpumem::cli
