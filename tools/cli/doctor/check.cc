#include "tools/cli/doctor/check.h"

#include "absl/strings/str_format.h"

namespace gpumem::cli::doctor {

const char* StatusName(Status status) {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kWarn: return "warn";
    case Status::kFail: return "fail";
    case Status::kSkipped: return "skipped";
  }
  return "skipped";
}

std::optional<Status> StatusFromName(const std::string& name) {
  for (Status s : {Status::kOk, Status::kWarn, Status::kFail, Status::kSkipped}) {
    if (name == StatusName(s)) return s;
  }
  return std::nullopt;
}

Check MakeCheck(std::string id, Status status, std::string finding, std::string fix) {
  return Check{std::move(id), status, std::move(finding), std::move(fix),
               nlohmann::json::object()};
}

nlohmann::json ToJson(const Check& check) {
  return {{"id", check.id},           {"status", StatusName(check.status)},
          {"finding", check.finding}, {"fix", check.fix},
          {"details", check.details}};
}

std::string Bytes(double bytes) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  if (bytes >= kGiB) return absl::StrFormat("%.2f GiB", bytes / kGiB);
  return absl::StrFormat("%.0f MiB", bytes / (1024.0 * 1024));
}

}  // namespace gpumem::cli::doctor
