// What every `gpumem doctor` check reports, and the facts that checks share.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace gpumem::cli::doctor {

enum class Status { kOk, kWarn, kFail, kSkipped };

// "ok", "warn", "fail" or "skipped" (the JSON and the text output both use these words).
const char* StatusName(Status status);
std::optional<Status> StatusFromName(const std::string& name);

struct Check {
  std::string id;       // stable name for scripts, e.g. "driver"
  Status status = Status::kSkipped;
  std::string finding;  // one line: what was found (or why it could not be checked)
  std::string fix;      // what to do; empty when there is nothing to do
  nlohmann::json details = nlohmann::json::object();
};

Check MakeCheck(std::string id, Status status, std::string finding, std::string fix = "");
nlohmann::json ToJson(const Check& check);

// What the Python half (python/gpumem/doctor.py) found out about torch.
struct TorchFacts {
  std::optional<std::string> cuda;        // torch.version.cuda of the torch found, if any
  std::vector<std::string> library_dirs;  // torch/lib and pip's nvidia/*/lib folders
};

// "1.50 GiB" style sizes for findings.
std::string Bytes(double bytes);

}  // namespace gpumem::cli::doctor
