#include "tools/report/merge.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpumem::report {

Merged MergeRanks(const std::vector<Report>& reports) {
  Merged m;
  std::uint64_t lowest = UINT64_MAX, highest = 0;
  std::size_t highest_rank = 0;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const Report& r = reports[i];
    RankSummary s;
    s.source = r.trace->source;
    s.peak_allocated = r.timeline.peak_allocated;
    s.peak_reserved = r.timeline.peak_reserved;
    s.leak_bytes_per_step = r.leaks.bytes_per_step;
    s.ooms = r.ooms.size();
    lowest = std::min(lowest, s.peak_allocated);
    if (s.peak_allocated >= highest) {
      highest = s.peak_allocated;
      highest_rank = i;
    }
    m.ranks.push_back(std::move(s));
  }
  if (m.ranks.empty()) return m;
  for (RankSummary& s : m.ranks) {
    s.peak_vs_lowest = lowest == 0 ? 1.0 : static_cast<double>(s.peak_allocated) / static_cast<double>(lowest);
  }
  m.imbalance = lowest == 0 ? 1.0 : static_cast<double>(highest) / static_cast<double>(lowest);
  m.summary = absl::StrFormat(
      "peak allocated ranges from %s to %s (%.1f%% apart); the highest is %s, which runs out "
      "first if memory gets tight",
      Bytes(static_cast<double>(lowest)), Bytes(static_cast<double>(highest)),
      (m.imbalance - 1) * 100, m.ranks[highest_rank].source);
  return m;
}

nlohmann::json MergedToJson(const Merged& m) {
  nlohmann::json j;
  j["imbalance"] = m.imbalance;
  j["summary"] = m.summary;
  j["ranks"] = nlohmann::json::array();
  for (const RankSummary& s : m.ranks) {
    j["ranks"].push_back({{"source", s.source},
                          {"peak_allocated", s.peak_allocated},
                          {"peak_reserved", s.peak_reserved},
                          {"leak_bytes_per_step", s.leak_bytes_per_step},
                          {"ooms", s.ooms},
                          {"peak_vs_lowest", s.peak_vs_lowest}});
  }
  return j;
}

std::string FormatMerged(const Merged& m) {
  std::string out = "Ranks compared:\n";
  for (const RankSummary& s : m.ranks) {
    absl::StrAppend(&out, absl::StrFormat("  %-40s peak %12s  %+6.1f%%  leak %s/step  %d OOMs\n", s.source,
                                          Bytes(static_cast<double>(s.peak_allocated)),
                                          (s.peak_vs_lowest - 1) * 100, Bytes(s.leak_bytes_per_step), s.ooms));
  }
  absl::StrAppend(&out, "  ", m.summary, "\n");
  return out;
}

}  // namespace gpumem::report
