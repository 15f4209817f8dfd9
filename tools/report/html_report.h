// `gpumem report --html`: one self-contained page (no network, no external files). The
// C++ side aggregates (a few thousand points, pruned trees, capped segment maps); the
// page only draws, so it stays responsive on traces of tens of millions of events.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/report/report.h"

namespace gpumem::report {

// What the page is given for one report (also used by tests).
nlohmann::json HtmlData(const Report& report);

std::string RenderHtml(const std::vector<Report>& reports);

// The page template, with /*GPUMEM_DATA*/ where the data goes (generated from
// assets/report.html at build time).
extern const char* const kReportHtmlTemplate;

}  // namespace gpumem::report
