#include <algorithm>
#include <cmath>
#include <iterator>

#include "tools/report/html_parts.h"
#include "tools/report/view_series.h"

namespace gpumem::report::html {
namespace {

double Round(double v, double unit) { return std::round(v / unit) * unit; }

double Seconds(std::int64_t time_us, std::int64_t t0) { return Round(static_cast<double>(time_us - t0) / 1e6, 1e-6); }

// The stack that held most of the site's memory at the last step end; a site that held
// nothing then shows its first stack.
std::uint32_t ShownStack(const Report& r, std::uint32_t site) {
  const std::uint32_t held = r.timeline.sites[site].leaked_stack;
  return r.sites.site_of_stack(held) == site ? held : r.sites.example_stack(site);
}

// Each top site's band: its name, its stack (ShownStack), its bytes.
nlohmann::json Bands(const Report& r, const Detail& d) {
  nlohmann::json bands = nlohmann::json::array();
  for (std::size_t k = 0; k < d.top_sites.size(); ++k) {
    std::vector<std::string> stack = StackNames(*r.trace, ShownStack(r, d.top_sites[k]));
    if (stack.size() > kStackFrames) stack.resize(kStackFrames);
    bands.push_back({{"site", r.sites.name(d.top_sites[k])}, {"stack", std::move(stack)}});
  }
  return bands;
}

nlohmann::json OomMarks(const Report& r, std::int64_t t0) {
  nlohmann::json marks = nlohmann::json::array();
  const std::size_t n = r.trace->events.size();
  for (std::size_t i = 0; i < r.ooms.size() && i < kListed; ++i) {
    const OomPoint& at = r.ooms[i].at;
    marks.push_back({{"s", Round(StepPosition(r.steps, n, at.index), 1e-4)},
                     {"t", Seconds(at.time_us, t0)},
                     {"step", at.step + 1},
                     {"cls", OomClassName(r.ooms[i].cls)}});
  }
  return marks;
}

// The leak's projection, in the same coordinates as the points: from the highest point of
// the last step whose end was seen, rising by the suspects' rate, to the step that would
// not fit in the capacity (drawn in the middle of that step).
nlohmann::json Projection(const Report& r) {
  const Timeline& tl = r.timeline;
  if (!r.projected_oom_step || !r.capacity || tl.sample_step.empty()) return nullptr;
  const std::size_t last = tl.sample_step.back();
  const std::uint64_t from = tl.StepPeak(LeakDevice(tl, r.leaks), last);
  return {{"step", *r.projected_oom_step + 1},
          {"at_s", static_cast<double>(*r.projected_oom_step) + 0.5},
          {"from_s", static_cast<double>(last) + 0.5},
          {"from_bytes", from},
          {"bytes_per_step", LeakRateOnItsDevice(tl, r.leaks)},
          {"capacity", *r.capacity}};
}

// What libraries outside the allocator held at each point's end (null without a CUPTI
// trace): the last change at or before it.
nlohmann::json HeldOutsideColumn(const Report& r, const ViewSeries& view) {
  const std::vector<HeldOutsideAt>& series = r.outside.held_over_time;
  if (series.empty()) return nullptr;
  std::vector<std::uint64_t> out;
  out.reserve(view.points.size());
  for (const ViewPoint& p : view.points) {
    const auto after = std::upper_bound(
        series.begin(), series.end(), p.time_us,
        [](std::int64_t t, const HeldOutsideAt& h) { return t < h.time_us; });
    out.push_back(after == series.begin() ? 0 : std::prev(after)->bytes);
  }
  return out;
}

// A series' points as columns: steps, seconds, the allocated envelope and end, reserved,
// what libraries held outside the allocator, and each top site's bytes ("bv").
nlohmann::json SeriesColumns(const Report& r, const ViewSeries& view, std::int64_t t0) {
  std::vector<double> s, secs;
  std::vector<std::uint64_t> amin, amax, aend, rmax;
  for (const ViewPoint& p : view.points) {
    s.push_back(Round(p.step_pos, 1e-4));
    secs.push_back(Seconds(p.time_us, t0));
    amin.push_back(p.allocated_min);
    amax.push_back(p.allocated_max);
    aend.push_back(p.allocated_end);
    rmax.push_back(p.reserved_max);
  }
  nlohmann::json out;
  out["s"] = std::move(s);
  out["t"] = std::move(secs);
  out["amin"] = std::move(amin);
  out["amax"] = std::move(amax);
  out["aend"] = std::move(aend);
  out["rmax"] = r.timeline.has_segments ? nlohmann::json(std::move(rmax)) : nlohmann::json(nullptr);
  out["out"] = HeldOutsideColumn(r, view);
  out["bv"] = view.site_values;
  return out;
}

}  // namespace

nlohmann::json TimelineJson(const Report& r, const Detail& d) {
  const trace::Trace& t = *r.trace;
  const std::int64_t t0 = t.events.empty() ? 0 : t.events.front().time_us;
  nlohmann::json out = SeriesColumns(r, d.view, t0);
  out["has_steps"] = !r.steps.ends.empty();
  out["events_per_point"] = d.view.points.empty() ? 0 : (t.events.size() + d.view.points.size() - 1) / d.view.points.size();
  out["bands"] = Bands(r, d);
  out["detail"] = nlohmann::json::array();
  for (const ViewSeries& v : d.detail_views) out["detail"].push_back(SeriesColumns(r, v, t0));
  out["ooms"] = OomMarks(r, t0);
  out["projection"] = Projection(r);
  return out;
}

nlohmann::json StepPeaksJson(const Report& r) {
  const std::vector<std::uint64_t>& peaks = r.timeline.step_peak_allocated;
  // The slot after the last step end holds what came after it (an OOM's step): kept
  // when anything was allocated there.
  std::size_t steps = peaks.size();
  while (steps > 1 && peaks[steps - 1] == 0) --steps;
  const std::size_t run = std::max<std::size_t>(1, (steps + kStepPeaks - 1) / kStepPeaks);
  nlohmann::json first = nlohmann::json::array(), highest = nlohmann::json::array();
  for (std::size_t b = 0; b < steps; b += run) {
    first.push_back(b + 1);
    highest.push_back(*std::max_element(peaks.begin() + b, peaks.begin() + std::min(steps, b + run)));
  }
  return {{"step", std::move(first)}, {"peak", std::move(highest)}};
}

}  // namespace gpumem::report::html
