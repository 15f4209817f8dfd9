// `gpumem diff`'s terminal table: the two points, the top sites by growth, totals.
#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/report/diff_output.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {

std::string DescribePoint(const DiffPoint& p) {
  if (!p.step) return "end of the trace";
  return absl::StrCat("end of step ", *p.step, " of ", p.steps.ends.size());
}

std::string DescribeSteps(const Steps& s) {
  const std::string& what = s.detail.empty() ? s.source : s.detail;
  return what.empty() ? StepMethodName(s.method) : absl::StrCat(StepMethodName(s.method), " (", what, ")");
}

std::string SignedBytes(std::int64_t bytes) {
  const std::string size = Bytes(static_cast<double>(bytes < 0 ? -bytes : bytes));
  return bytes > 0 ? "+" + size : bytes < 0 ? "-" + size : size;
}

namespace {

std::string PointLine(const char* label, const DiffPoint& p) {
  return absl::StrCat("  ", label, p.trace, ", ", DescribePoint(p), "  (steps: ", DescribeSteps(p.steps),
                      ")  live ", Bytes(p.live_bytes), "\n");
}

std::string Row(const std::string& from, const std::string& to, const std::string& delta,
                const std::string& what) {
  return absl::StrFormat("  %12s %12s %13s  %s\n", from, to, delta, what);
}

std::string SiteRow(const SiteDiff& s) {
  const SiteChange c = s.change();
  const std::string tag = c == SiteChange::kNew || c == SiteChange::kGone ? absl::StrCat("  [", SiteChangeName(c), "]") : "";
  return Row(Bytes(s.from_bytes), Bytes(s.to_bytes), SignedBytes(s.delta()), s.site + tag);
}

std::string Counts(const Diff& d) {
  return absl::StrCat(d.sites.size(), " sites: ", d.Count(SiteChange::kGrown), " grown, ",
                      d.Count(SiteChange::kNew), " new, ", d.Count(SiteChange::kShrunk), " shrunk, ",
                      d.Count(SiteChange::kGone), " gone, ", d.Count(SiteChange::kUnchanged), " unchanged");
}

std::string Matching(const Diff& d) {
  if (!d.two_runs) return "";
  return absl::StrCat("  sites matched by name (file:line function): ", d.matched(), "; only in the first run: ",
                      d.Count(SiteChange::kGone), ", only in the second: ", d.Count(SiteChange::kNew), "\n");
}

std::string Folders(const Diff& d) {
  const std::string& a = d.from.sites_relative_to;
  const std::string& b = d.to.sites_relative_to;
  if (a.empty() && b.empty()) return "";
  if (a == b) return absl::StrCat("  sites in ", a, "\n");
  return absl::StrCat("  sites in ", a.empty() ? "-" : a, " (first run), ", b.empty() ? "-" : b, " (second run)\n");
}

}  // namespace

std::string FormatDiffTerminal(const Diff& d, std::size_t top) {
  std::string out = absl::StrCat("gpumem diff: live bytes by site, ", d.two_runs ? "two runs" : "two step ends", "\n");
  absl::StrAppend(&out, PointLine("from: ", d.from), PointLine("to:   ", d.to), Matching(d), Folders(d), "\n");
  absl::StrAppend(&out, Row("from", "to", "growth", "site (largest growth first)"));
  const std::size_t shown = top == 0 ? d.sites.size() : std::min(top, d.sites.size());
  for (std::size_t i = 0; i < shown; ++i) absl::StrAppend(&out, SiteRow(d.sites[i]));
  if (shown < d.sites.size()) {
    std::int64_t rest = 0;
    for (std::size_t i = shown; i < d.sites.size(); ++i) rest += d.sites[i].delta();
    absl::StrAppend(&out, Row("", "", SignedBytes(rest), absl::StrCat("... ", d.sites.size() - shown,
                                                                      " more sites (--top N)")));
  }
  const std::int64_t total = static_cast<std::int64_t>(d.to.live_bytes) - static_cast<std::int64_t>(d.from.live_bytes);
  absl::StrAppend(&out, Row(Bytes(d.from.live_bytes), Bytes(d.to.live_bytes), SignedBytes(total),
                            absl::StrCat("total (", Counts(d), ")")));
  return out;
}

}  // namespace gpumem::report
