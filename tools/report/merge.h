// Several traces of one job (one per rank): one table by rank number, the ranks that
// differ from the rest named first (a leak on one rank of hundreds, with its site), and
// which rank runs out of memory first. Works from per-rank summaries (rank_summary.h), so
// the traces themselves can be read one at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/report/rank_summary.h"
#include "tools/report/report.h"

namespace gpumem::report {

// A trace named on the command line that could not be read.
struct UnreadTrace {
  std::string source;
  std::string error;
};

struct Merged {
  std::vector<RankSummary> ranks;  // by rank number, then file order
  std::vector<UnreadTrace> unread;
  std::vector<std::int64_t> missing_ranks;  // below the headers' world size, no trace
  double imbalance = 1;  // highest peak allocated / lowest
  std::string summary;
  std::string first_out;  // which rank runs out of memory first, and when
};

Merged MergeRanks(std::vector<RankSummary> ranks, std::vector<UnreadTrace> unread = {});
Merged MergeRanks(const std::vector<Report>& reports);
nlohmann::json MergedToJson(const Merged& merged);
std::string FormatMerged(const Merged& merged);

}  // namespace gpumem::report
