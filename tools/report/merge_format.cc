// The merged view as JSON and as terminal text.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/report/merge.h"

namespace gpumem::report {
namespace {

template <typename T>
nlohmann::json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// [{pid, bytes}] on the rank's GPU at its peak; null where NVML was not read then.
nlohmann::json OtherProcessesJson(const RankSummary& s) {
  if (!s.other_processes) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const ProcessBytes& p : *s.other_processes) {
    out.push_back({{"pid", p.pid}, {"bytes", p.bytes}});
  }
  return out;
}

// Steps are numbered from 1 in the JSON, as in the single trace's.
nlohmann::json StepJson(const std::optional<std::size_t>& step) {
  return step ? nlohmann::json(*step + 1) : nlohmann::json(nullptr);
}

nlohmann::json RankToJson(const RankSummary& s) {
  return {{"rank", OrNull(s.rank)},
          {"rank_from", s.rank_from},
          {"host", s.host},
          {"source", s.source},
          {"steps", s.steps},
          {"peak_allocated", s.peak_allocated},
          {"peak_reserved", s.peak_reserved},
          {"outside_allocator", OrNull(s.outside_allocator)},
          {"pid", OrNull(s.pid)},
          {"other_processes", OtherProcessesJson(s)},
          {"leak_bytes_per_step", s.leak_bytes_per_step},
          {"leak_site", s.leak_site},
          {"projected_oom_step", StepJson(s.projected_oom_step)},
          {"ooms", s.ooms},
          {"first_oom_step", StepJson(s.first_oom_step)},
          {"damage", s.damage},
          {"peak_vs_lowest", s.peak_vs_lowest},
          {"differs", s.differs}};
}

constexpr std::size_t kDifferingShown = 20;

std::string StepOrDash(const std::optional<std::size_t>& step) {
  return step ? absl::StrCat(*step + 1) : "-";
}

void AppendDiffering(const Merged& m, std::string* out) {
  std::size_t shown = 0, more = 0;
  for (const RankSummary& s : m.ranks) {
    if (s.differs.empty()) continue;
    if (shown++ == 0) absl::StrAppend(out, "  Ranks that differ from the rest:\n");
    if (shown > kDifferingShown) {
      ++more;
      continue;
    }
    absl::StrAppend(out, "    rank ", *s.rank, " (", s.source, "): ", s.differs, "\n");
  }
  if (more > 0) absl::StrAppend(out, "    ... and ", more, " more (--json lists them)\n");
  if (shown == 0 && !m.ranks.empty()) {
    absl::StrAppend(out, "  No rank differs from the rest.\n");
  }
}

void AppendProblems(const Merged& m, std::string* out) {
  for (const UnreadTrace& u : m.unread) {
    absl::StrAppend(out, "  not read: ", u.source, ": ", u.error, "\n");
  }
  for (std::int64_t r : m.missing_ranks) {
    absl::StrAppend(out, "  rank ", r, ": no trace (the headers say the job had more ranks)\n");
  }
}

}  // namespace

nlohmann::json MergedToJson(const Merged& m) {
  nlohmann::json j;
  j["imbalance"] = m.imbalance;
  j["summary"] = m.summary;
  j["first_out"] = m.first_out;
  j["missing_ranks"] = m.missing_ranks;
  j["unread"] = nlohmann::json::array();
  for (const UnreadTrace& u : m.unread) j["unread"].push_back({{"source", u.source}, {"error", u.error}});
  j["ranks"] = nlohmann::json::array();
  for (const RankSummary& s : m.ranks) j["ranks"].push_back(RankToJson(s));
  return j;
}

std::string FormatMerged(const Merged& m) {
  std::string out = absl::StrCat("Ranks compared (", m.ranks.size(), " traces):\n");
  AppendDiffering(m, &out);
  AppendProblems(m, &out);
  absl::StrAppend(&out, absl::StrFormat("  %5s %14s %8s %14s %14s %10s %5s  %s\n", "rank",
                                        "peak alloc", "vs low", "outside alloc", "leak/step",
                                        "OOM step", "OOMs", "trace"));
  for (const RankSummary& s : m.ranks) {
    absl::StrAppend(&out, absl::StrFormat(
        "  %5d %14s %+7.1f%% %14s %14s %10s %5d  %s%s\n", *s.rank,
        Bytes(static_cast<double>(s.peak_allocated)), (s.peak_vs_lowest - 1) * 100,
        s.outside_allocator ? Bytes(static_cast<double>(*s.outside_allocator)) : "unknown",
        Bytes(s.leak_bytes_per_step), StepOrDash(s.first_oom_step ? s.first_oom_step
                                                                   : s.projected_oom_step),
        s.ooms, s.source, s.differs.empty() ? "" : "  <-"));
  }
  if (!m.summary.empty()) absl::StrAppend(&out, "  ", m.summary, "\n");
  if (!m.first_out.empty()) absl::StrAppend(&out, "  ", m.first_out, "\n");
  return out;
}

}  // namespace gpumem::report
