#include "tools/cli/doctor/python_checks.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "tools/cli/doctor/subprocess.h"

namespace gpumem::cli::doctor {
namespace {

constexpr int kPythonTimeoutMs = 120000;  // a cold `import torch` on a network disk is slow
const char* const kPythonIds[] = {"torch", "start_method", "libgpumem_torch"};

PythonResult AllSkipped(const std::string& why) {
  PythonResult result;
  for (const char* id : kPythonIds) {
    result.checks.push_back(MakeCheck(id, Status::kSkipped, why,
                                      "run gpumem doctor --python /path/to/the/job's/python"));
  }
  return result;
}

Check FromJson(const nlohmann::json& j) {
  Check check;
  check.id = j.value("id", "?");
  check.status = StatusFromName(j.value("status", "")).value_or(Status::kSkipped);
  check.finding = j.value("finding", "");
  check.fix = j.value("fix", "");
  if (j.contains("details")) check.details = j["details"];
  return check;
}

}  // namespace

PythonResult RunPythonChecks(const std::string& python, const std::string& script,
                             const std::string& lib_dir) {
  setenv("GPUMEM_LIB_DIR", lib_dir.c_str(), 1);
  std::optional<Output> out = RunCapture({python, script}, kPythonTimeoutMs);
  if (!out.has_value()) return AllSkipped(absl::StrCat("cannot run ", python, ": not found"));
  nlohmann::json doc = nlohmann::json::parse(out->stdout_text, nullptr, false);
  if (out->exit_code != 0 || doc.is_discarded() || !doc.contains("checks")) {
    return AllSkipped(absl::StrCat(python, " ", script, " did not report (exit ",
                                   out->exit_code, ")"));
  }
  PythonResult result;
  for (const nlohmann::json& c : doc["checks"]) result.checks.push_back(FromJson(c));
  const nlohmann::json& facts = doc.value("facts", nlohmann::json::object());
  if (facts.contains("torch_cuda") && facts["torch_cuda"].is_string()) {
    result.torch.cuda = facts["torch_cuda"].get<std::string>();
  }
  for (const nlohmann::json& d : facts.value("library_dirs", nlohmann::json::array())) {
    if (d.is_string()) result.torch.library_dirs.push_back(d.get<std::string>());
  }
  return result;
}

}  // namespace gpumem::cli::doctor
