#include "tools/report/rank_summary.h"

#include <algorithm>
#include <cctype>

#include "tools/report/outside_format.h"

namespace gpumem::report {
namespace {

std::optional<std::int64_t> DigitsAt(const std::string& s, std::size_t at) {
  std::size_t end = at;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  if (end == at || end - at > 9) return std::nullopt;
  return std::stoll(s.substr(at, end - at));
}

void SetRank(const Report& report, std::size_t file_index, RankSummary* s) {
  if (report.trace->run.rank) {
    s->rank = report.trace->run.rank;
    s->rank_from = "header";
  } else if ((s->rank = RankFromFileName(s->source))) {
    s->rank_from = "file name";
  } else {
    s->rank = static_cast<std::int64_t>(file_index);
    s->rank_from = "file order";
  }
}

}  // namespace

std::optional<std::int64_t> RankFromFileName(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (const std::size_t at = name.find("rank"); at != std::string::npos) {
    if (auto rank = DigitsAt(name, at + 4)) return rank;
  }
  name = name.substr(0, name.find('.'));
  std::size_t start = name.size();
  while (start > 0 && std::isdigit(static_cast<unsigned char>(name[start - 1]))) --start;
  return DigitsAt(name, start);
}

RankSummary SummarizeRank(const Report& report, std::size_t file_index) {
  RankSummary s;
  s.source = report.trace->source;
  s.file_index = file_index;
  SetRank(report, file_index, &s);
  s.host = report.trace->run.host;
  s.world_size = report.trace->run.world_size;
  s.steps = report.steps.count;
  s.peak_allocated = report.timeline.peak_allocated;
  s.peak_reserved = report.timeline.peak_reserved;
  s.outside_allocator = OutsideAtPeak(report.outside);
  s.pid = report.trace->run.pid;
  const std::optional<OutsideMoment>& peak = report.outside.peak;
  if (peak && peak->processes && peak->processes->at_moment) {
    s.other_processes = peak->processes->note.processes.others;
  }
  s.leak_bytes_per_step = report.leaks.bytes_per_step;
  if (!report.leaks.suspects.empty()) s.leak_site = SuspectText(report.leaks.suspects.front());
  // A leak outside the allocator counts with the rank's own, named where it is the faster.
  if (const std::optional<Growth>& outside = report.outside_holder.growth) {
    if (outside->bytes_per_step > report.leaks.bytes_per_step) {
      s.leak_site = HolderName(report.outside_holder) + " (outside the allocator)";
    }
    s.leak_bytes_per_step += outside->bytes_per_step;
  }
  s.projected_oom_step = report.projected_oom_step;
  if (const std::optional<std::size_t>& outside = report.outside_projected_oom_step) {
    s.projected_oom_step = std::min(s.projected_oom_step.value_or(*outside), *outside);
  }
  s.ooms = report.ooms.size();
  if (!report.ooms.empty()) s.first_oom_step = report.ooms.front().at.step;
  if (!report.trace->warnings.empty()) s.damage = report.trace->warnings.front();
  return s;
}

}  // namespace gpumem::report
