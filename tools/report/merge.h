// Several traces of one job (one per rank): a side-by-side view that shows imbalance.
// A rank whose peak is far above the others' is the one that runs out first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/report/report.h"

namespace gpumem::report {

struct RankSummary {
  std::string source;
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  double leak_bytes_per_step = 0;
  std::size_t ooms = 0;
  double peak_vs_lowest = 1;  // peak allocated / the lowest rank's
};

struct Merged {
  std::vector<RankSummary> ranks;
  double imbalance = 1;  // highest peak allocated / lowest
  std::string summary;
};

Merged MergeRanks(const std::vector<Report>& reports);
nlohmann::json MergedToJson(const Merged& merged);
std::string FormatMerged(const Merged& merged);

}  // namespace gpumem::report
