#include "tools/cli/report_ranks.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "nlohmann/json.hpp"
#include "tools/cli/command.h"
#include "tools/cli/damage_warning.h"
#include "tools/cli/loss_warning.h"
#include "tools/report/cupti_companion.h"
#include "tools/report/json_report.h"
#include "tools/report/merge.h"
#include "tools/report/terminal_report.h"
#include "tools/trace/load.h"

namespace gpumem::cli {
namespace {

// Up to this many traces, each one's whole report is printed before the merged view;
// beyond, only those of the ranks that differ, at most kDifferingReports of them.
constexpr std::size_t kFullReportsUpTo = 4;
constexpr std::size_t kDifferingReports = 3;
constexpr unsigned kMaxReaders = 2;  // traces in memory at once

// What is kept of one trace once its analysis is done.
struct RankOutput {
  bool read = false;
  report::RankSummary summary;
  report::UnreadTrace unread;
  std::string text;  // its terminal report, or its JSON
};

RankOutput Analyse(const std::string& path, std::size_t index,
                   const report::ReportOptions& options, bool json) {
  RankOutput out;
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
  if (!t.ok()) {
    out.unread = {path, std::string(t.status().message())};
    return out;
  }
  WarnOfLoss(*t);
  WarnOfDamage(*t);
  const std::optional<trace::Trace> cupti = report::LoadCuptiCompanion(path);
  report::ReportOptions with_cupti = options;
  with_cupti.cupti = cupti ? &*cupti : nullptr;
  const report::Report r = report::BuildReport(*t, with_cupti);
  out.read = true;
  out.summary = report::SummarizeRank(r, index);
  out.text = json ? report::ReportToJson(r).dump(2)
                  : report::FormatTerminal(r, isatty(STDOUT_FILENO) != 0);
  return out;
}

std::vector<RankOutput> AnalyseAll(const std::vector<std::string>& paths,
                                   const report::ReportOptions& options, bool json) {
  std::vector<RankOutput> outputs(paths.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < paths.size();) {
      outputs[i] = Analyse(paths[i], i, options, json);
    }
  };
  const unsigned readers = std::max(1u, std::min(kMaxReaders, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned k = 1; k < readers; ++k) threads.emplace_back(work);
  work();
  for (std::thread& th : threads) th.join();
  return outputs;
}

report::Merged Merge(std::vector<RankOutput>& outputs) {
  std::vector<report::RankSummary> ranks;
  std::vector<report::UnreadTrace> unread;
  for (RankOutput& o : outputs) {
    if (o.read) {
      ranks.push_back(o.summary);
    } else {
      unread.push_back(o.unread);
    }
  }
  return report::MergeRanks(std::move(ranks), std::move(unread));
}

void PrintJson(const std::vector<RankOutput>& outputs, const report::Merged& merged) {
  std::printf("{\n\"traces\": [");
  bool first = true;
  for (const RankOutput& o : outputs) {
    if (!o.read) continue;
    std::printf("%s\n%s", first ? "" : ",", o.text.c_str());
    first = false;
  }
  std::printf("\n],\n\"merged\": %s\n}\n", report::MergedToJson(merged).dump(2).c_str());
}

// Whether trace `o`'s own report is printed before the merged view.
bool ShowsFullReport(const RankOutput& o, std::size_t traces, std::size_t* differing_shown) {
  if (!o.read) return false;
  if (traces <= kFullReportsUpTo) return true;
  if (o.summary.differs.empty() || *differing_shown >= kDifferingReports) return false;
  ++*differing_shown;
  return true;
}

void PrintTerminal(std::vector<RankOutput>& outputs, const report::Merged& merged) {
  // The differing flags are set on the merged copy: carry them back.
  for (const report::RankSummary& s : merged.ranks) outputs[s.file_index].summary.differs = s.differs;
  std::size_t shown = 0, differing_shown = 0;
  for (const RankOutput& o : outputs) {
    if (!ShowsFullReport(o, outputs.size(), &differing_shown)) continue;
    std::printf("%s%s", shown++ ? "\n" : "", o.text.c_str());
  }
  std::printf("%s%s", shown ? "\n" : "", report::FormatMerged(merged).c_str());
}

}  // namespace

int ReportRanks(const std::vector<std::string>& paths, const report::ReportOptions& options,
                bool json) {
  std::vector<RankOutput> outputs = AnalyseAll(paths, options, json);
  const report::Merged merged = Merge(outputs);
  if (json) {
    PrintJson(outputs, merged);
  } else {
    PrintTerminal(outputs, merged);
  }
  for (const report::UnreadTrace& u : merged.unread) {
    std::fprintf(stderr, "gpumem report: %s: %s\n", u.source.c_str(), u.error.c_str());
  }
  return merged.unread.empty() ? kExitOk : kExitBadInput;
}

}  // namespace gpumem::cli
