#include "tools/report/diff.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/report/live_state.h"
#include "tools/report/sites.h"

namespace gpumem::report {

const char* SiteChangeName(SiteChange change) {
  switch (change) {
    case SiteChange::kGrown: return "grown";
    case SiteChange::kShrunk: return "shrunk";
    case SiteChange::kUnchanged: return "unchanged";
    case SiteChange::kNew: return "new";
    case SiteChange::kGone: return "gone";
  }
  return "unchanged";
}

SiteChange SiteDiff::change() const {
  if (from_bytes == 0 && to_bytes > 0) return SiteChange::kNew;
  if (from_bytes > 0 && to_bytes == 0) return SiteChange::kGone;
  if (to_bytes > from_bytes) return SiteChange::kGrown;
  if (to_bytes < from_bytes) return SiteChange::kShrunk;
  return SiteChange::kUnchanged;
}

std::size_t Diff::Count(SiteChange change) const {
  return std::count_if(sites.begin(), sites.end(),
                       [change](const SiteDiff& s) { return s.change() == change; });
}

std::size_t Diff::matched() const {
  return std::count_if(sites.begin(), sites.end(),
                       [](const SiteDiff& s) { return s.from_bytes > 0 && s.to_bytes > 0; });
}

namespace {

// Live bytes by site name at one point.
struct Live {
  absl::flat_hash_map<std::string, std::uint64_t> by_site;
  std::uint64_t allocated = 0;
};

Live Snapshot(const LiveState& state, const SiteTable& sites) {
  Live live;
  live.allocated = state.allocated();
  const std::vector<std::uint64_t>& bytes = state.site_live();
  for (std::uint32_t site = 0; site < bytes.size(); ++site) {
    if (bytes[site] > 0) live.by_site[sites.name(site)] += bytes[site];
  }
  return live;
}

// The state after events [0, end) for each of `ends`, in one walk of the trace.
std::vector<Live> LiveAt(const trace::Trace& t, const SiteTable& sites,
                         const std::vector<std::size_t>& ends) {
  std::vector<std::size_t> order(ends.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return ends[x] < ends[y]; });
  LiveState state(sites);
  std::vector<Live> out(ends.size());
  std::size_t applied = 0;
  for (std::size_t k : order) {
    for (; applied < ends[k] && applied < t.events.size(); ++applied) state.Apply(t.events[applied]);
    out[k] = Snapshot(state, sites);
  }
  return out;
}

DiffPoint Prepare(const trace::Trace& t, const SiteTable& sites, const DiffOptions& options) {
  DiffPoint p;
  p.trace = t.source;
  p.steps = FindSteps(t, options.step_site, sites.common_dir());
  p.sites_relative_to = sites.common_dir();
  p.event_index = t.events.size();
  return p;
}

absl::Status NoStepEnds(const DiffPoint& p) {
  return absl::InvalidArgumentError(absl::StrCat(
      p.trace, " has no step ends (steps: ", StepMethodName(p.steps.method),
      "): no step marks, annotations or repeating pattern; try --step-site FILE:LINE"));
}

// Puts `p` at the end of `step` (1-based), or at the trace's end for nullopt.
absl::Status Place(std::optional<std::size_t> step, const char* flag, DiffPoint* p) {
  p->step = step;
  if (!step) return absl::OkStatus();
  const Steps& s = p->steps;
  if (*step >= 1 && *step <= s.ends.size()) {
    p->event_index = s.ends[*step - 1];
    return absl::OkStatus();
  }
  if (s.ends.empty()) return NoStepEnds(*p);
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", *step, ": ", p->trace, " has step ends 1..",
                                                 s.ends.size(), " (steps: ", StepMethodName(s.method),
                                                 "), no step ", *step));
}

std::vector<SiteDiff> Compare(const Live& from, const Live& to) {
  absl::flat_hash_set<std::string> names;
  for (const auto& [name, bytes] : from.by_site) names.insert(name);
  for (const auto& [name, bytes] : to.by_site) names.insert(name);
  std::vector<SiteDiff> out;
  for (const std::string& name : names) {
    SiteDiff d;
    d.site = name;
    if (auto it = from.by_site.find(name); it != from.by_site.end()) d.from_bytes = it->second;
    if (auto it = to.by_site.find(name); it != to.by_site.end()) d.to_bytes = it->second;
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const SiteDiff& x, const SiteDiff& y) {
    return x.delta() != y.delta() ? x.delta() > y.delta() : x.site < y.site;
  });
  return out;
}

std::optional<std::size_t> LastStep(const DiffPoint& p) {
  if (p.steps.ends.empty()) return std::nullopt;
  return p.steps.ends.size();
}

}  // namespace

absl::StatusOr<Diff> DiffSteps(const trace::Trace& trace, const DiffOptions& options) {
  const SiteTable sites(trace);
  Diff d;
  d.from = Prepare(trace, sites, options);
  d.to = d.from;
  const std::size_t last = d.from.steps.ends.size();
  if (last == 0) return NoStepEnds(d.from);
  absl::Status ok = Place(options.from_step.value_or(1), "--from", &d.from);
  if (ok.ok()) ok = Place(options.to_step.value_or(last), "--to", &d.to);
  if (!ok.ok()) return ok;
  const std::vector<Live> live = LiveAt(trace, sites, {d.from.event_index, d.to.event_index});
  d.from.live_bytes = live[0].allocated;
  d.to.live_bytes = live[1].allocated;
  d.sites = Compare(live[0], live[1]);
  return d;
}

absl::StatusOr<Diff> DiffRuns(const trace::Trace& a, const trace::Trace& b, const DiffOptions& options) {
  const SiteTable sites_a(a);
  const SiteTable sites_b(b);
  Diff d;
  d.two_runs = true;
  d.from = Prepare(a, sites_a, options);
  d.to = Prepare(b, sites_b, options);
  absl::Status ok = Place(options.from_step ? options.from_step : LastStep(d.from), "--from", &d.from);
  if (ok.ok()) ok = Place(options.to_step ? options.to_step : LastStep(d.to), "--to", &d.to);
  if (!ok.ok()) return ok;
  const Live from = LiveAt(a, sites_a, {d.from.event_index}).front();
  const Live to = LiveAt(b, sites_b, {d.to.event_index}).front();
  d.from.live_bytes = from.allocated;
  d.to.live_bytes = to.allocated;
  d.sites = Compare(from, to);
  return d;
}

}  // namespace gpumem::report
