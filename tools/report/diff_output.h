// `gpumem diff` outputs: a terminal table, one JSON object, a self-contained HTML page.
// Each shows the `top` sites by growth (0: all) and totals over every site.
#pragma once

#include <cstddef>
#include <string>

#include "nlohmann/json.hpp"
#include "tools/report/diff.h"

namespace gpumem::report {

inline constexpr std::size_t kDiffTopDefault = 20;

// "end of step 3 of 12" or "end of the trace".
std::string DescribePoint(const DiffPoint& point);
// How the steps were found: "step-events (optimizer step hooks)", "inferred (...)", "none".
std::string DescribeSteps(const Steps& steps);
// "+1.50 MiB", "-2.00 KiB", "0 B".
std::string SignedBytes(std::int64_t bytes);

std::string FormatDiffTerminal(const Diff& diff, std::size_t top);

nlohmann::json DiffToJson(const Diff& diff, std::size_t top);

std::string RenderDiffHtml(const Diff& diff, std::size_t top);

// The page template, with /*GPUMEM_DATA*/ where DiffToJson's object goes (generated from
// assets/diff.html at build time).
extern const char* const kDiffHtmlTemplate;

}  // namespace gpumem::report
