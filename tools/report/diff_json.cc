// `gpumem diff --json`: one object; the HTML page is drawn from the same object.
#include <algorithm>

#include "tools/report/diff_output.h"

namespace gpumem::report {
namespace {

using nlohmann::json;

json PointToJson(const DiffPoint& p) {
  const Steps& s = p.steps;
  return {{"trace", p.trace},
          {"step", p.step ? json(*p.step) : json(nullptr)},
          {"at", DescribePoint(p)},
          {"event_index", p.event_index},
          {"steps", {{"count", s.count},
                     {"method", StepMethodName(s.method)},
                     {"detail", s.detail},
                     {"source", s.source},
                     {"ends_seen", s.ends.size()}}},
          {"sites_relative_to", p.sites_relative_to.empty() ? json(nullptr) : json(p.sites_relative_to)},
          {"live_bytes", p.live_bytes}};
}

json SiteToJson(const SiteDiff& s) {
  return {{"site", s.site},
          {"from_bytes", s.from_bytes},
          {"to_bytes", s.to_bytes},
          {"delta_bytes", s.delta()},
          {"change", SiteChangeName(s.change())}};
}

json CountsToJson(const Diff& d) {
  json counts = {{"sites", d.sites.size()}, {"matched", d.matched()}};
  for (SiteChange c : {SiteChange::kGrown, SiteChange::kNew, SiteChange::kShrunk, SiteChange::kGone,
                       SiteChange::kUnchanged}) {
    counts[SiteChangeName(c)] = d.Count(c);
  }
  return counts;
}

}  // namespace

nlohmann::json DiffToJson(const Diff& d, std::size_t top) {
  const std::size_t shown = top == 0 ? d.sites.size() : std::min(top, d.sites.size());
  json sites = json::array();
  std::int64_t rest = 0;
  for (std::size_t i = 0; i < d.sites.size(); ++i) {
    if (i < shown) {
      sites.push_back(SiteToJson(d.sites[i]));
    } else {
      rest += d.sites[i].delta();
    }
  }
  const std::int64_t total = static_cast<std::int64_t>(d.to.live_bytes) - static_cast<std::int64_t>(d.from.live_bytes);
  return {{"mode", d.two_runs ? "runs" : "steps"},
          {"from", PointToJson(d.from)},
          {"to", PointToJson(d.to)},
          {"sites", std::move(sites)},
          {"not_shown", {{"sites", d.sites.size() - shown}, {"delta_bytes", rest}}},
          {"counts", CountsToJson(d)},
          {"total", {{"from_bytes", d.from.live_bytes}, {"to_bytes", d.to.live_bytes}, {"delta_bytes", total}}}};
}

}  // namespace gpumem::report
