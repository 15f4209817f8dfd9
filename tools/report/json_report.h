// `gpumem report --json`: the report as one JSON object. Steps are numbered from 1 here,
// as a user counts them.
#pragma once

#include "nlohmann/json.hpp"
#include "tools/report/report.h"

namespace gpumem::report {

nlohmann::json ReportToJson(const Report& report);

// One line: what is wrong, if anything.
std::string Verdict(const Report& report);

}  // namespace gpumem::report
