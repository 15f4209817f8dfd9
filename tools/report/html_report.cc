#include "tools/report/html_report.h"

#include <algorithm>

#include "absl/strings/str_replace.h"
#include "tools/report/detail.h"
#include "tools/report/html_parts.h"
#include "tools/report/json_report.h"
#include "tools/report/merge.h"

namespace gpumem::report {
namespace {

// The report's JSON as --json writes it, with its per-event lists cut to html::kListed
// items (an OOM storm can have thousands); "<list>_total" keeps the full count.
nlohmann::json CappedReportJson(const Report& r) {
  nlohmann::json j = ReportToJson(r);
  for (const char* list : {"ooms", "leak_suspects", "failed_allocations", "warnings"}) {
    if (!j.contains(list) || !j[list].is_array()) continue;
    nlohmann::json& items = j[list];
    j[std::string(list) + "_total"] = items.size();
    if (items.size() > html::kListed) items.erase(items.begin() + html::kListed, items.end());
  }
  return j;
}

std::size_t PointsPerReport(std::size_t reports) {
  return std::max(html::kMinRankPoints, html::kViewPoints / std::max<std::size_t>(reports, 1));
}

// The ranks that get a section of their own (file indices): those that differ from the
// rest first, then by rank, at most html::kRankSections; the merged view covers all.
std::vector<bool> RanksWithSections(const Merged& merged, std::size_t reports) {
  std::vector<bool> shown(reports, reports <= html::kRankSections);
  if (reports <= html::kRankSections) return shown;
  std::size_t count = 0;
  for (bool differing : {true, false}) {
    for (const RankSummary& s : merged.ranks) {
      if (count < html::kRankSections && s.differs.empty() != differing && !shown[s.file_index]) {
        shown[s.file_index] = true;
        ++count;
      }
    }
  }
  return shown;
}

// A rank without a section: its figures for the merged view only.
nlohmann::json RankOnly(const Report& r) {
  return {{"json", CappedReportJson(r)}, {"step_peaks", html::StepPeaksJson(r)}, {"no_section", true}};
}

nlohmann::json HtmlDataWithPoints(const Report& r, std::size_t points) {
  const Detail detail = BuildDetail(r, points, html::kTopSites, html::kDetailEvents);
  nlohmann::json out;
  out["json"] = CappedReportJson(r);
  out["timeline"] = html::TimelineJson(r, detail);
  out["step_peaks"] = html::StepPeaksJson(r);
  out["flame_peak"] = detail.at_peak ? html::FlameJson(r, *detail.at_peak) : nlohmann::json(nullptr);
  out["flame_oom"] = detail.at_oom ? html::FlameJson(r, *detail.at_oom) : nlohmann::json(nullptr);
  bool truncated = false;
  out["segments_peak"] = detail.at_peak ? html::SegmentsJson(*detail.at_peak, &truncated) : nlohmann::json::array();
  out["segments_truncated"] = truncated;
  return out;
}

}  // namespace

nlohmann::json HtmlData(const Report& r) { return HtmlDataWithPoints(r, html::kViewPoints); }

std::string RenderHtml(const std::vector<Report>& reports) {
  nlohmann::json data;
  data["reports"] = nlohmann::json::array();
  if (reports.size() == 1) data["reports"].push_back(HtmlData(reports[0]));
  if (reports.size() > 1) {
    const Merged merged = MergeRanks(reports);
    const std::vector<bool> sections = RanksWithSections(merged, reports.size());
    const std::size_t points = PointsPerReport(std::min(reports.size(), html::kRankSections));
    for (std::size_t i = 0; i < reports.size(); ++i) {
      data["reports"].push_back(sections[i] ? HtmlDataWithPoints(reports[i], points) : RankOnly(reports[i]));
    }
    data["merged"] = MergedToJson(merged);
    // Which report each rank is (sources can repeat: "synthetic", the same file twice).
    for (std::size_t i = 0; i < merged.ranks.size(); ++i) {
      data["merged"]["ranks"][i]["report"] = merged.ranks[i].file_index;
    }
  }
  // Inside <script>, "</" could end the element early; JSON allows "<\/" instead.
  const std::string text = absl::StrReplaceAll(data.dump(), {{"</", "<\\/"}});
  return absl::StrReplaceAll(kReportHtmlTemplate, {{"/*GPUMEM_DATA*/", text}});
}

}  // namespace gpumem::report
