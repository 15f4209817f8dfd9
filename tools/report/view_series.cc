#include "tools/report/view_series.h"

#include <algorithm>

namespace gpumem::report {

double StepPosition(const Steps& steps, std::size_t events, std::size_t index) {
  const std::size_t k = steps.StepOf(index);
  const std::size_t begin = k == 0 ? 0 : steps.ends[k - 1];
  const std::size_t end = k < steps.ends.size() ? steps.ends[k] : events;
  if (end <= begin) return static_cast<double>(k);
  const double into = static_cast<double>(index + 1 - begin) / static_cast<double>(end - begin);
  return static_cast<double>(k) + std::min(1.0, into);
}

ViewWindow DetailWindow(std::size_t trace_events, std::size_t index, std::size_t events) {
  events = std::min(events, trace_events);
  const std::size_t begin = std::min(index - std::min(index, events / 2), trace_events - events);
  return ViewWindow{begin, begin + events, events};
}

ViewSeriesBuilder::ViewSeriesBuilder(const trace::Trace& trace, const Steps& steps,
                                     std::vector<std::uint32_t> top_sites, ViewWindow window)
    : trace_(trace), steps_(steps), top_sites_(std::move(top_sites)), window_(window) {
  window_.end = std::min(window_.end, trace.events.size());
  window_.begin = std::min(window_.begin, window_.end);
  const std::size_t n = window_.end - window_.begin;
  const std::size_t points = std::max<std::size_t>(window_.points, 1);
  bucket_ = std::max<std::size_t>(1, (n + points - 1) / points);
  out_.points.reserve(std::min(n, points));
  out_.site_values.assign(top_sites_.size(), {});
}

void ViewSeriesBuilder::Observe(std::size_t index, const LiveState& state) {
  if (index < window_.begin || index >= window_.end) return;
  const std::uint64_t allocated = state.allocated();
  if (!open_) {
    point_ = ViewPoint{};
    point_.allocated_min = allocated;
    open_ = true;
  }
  point_.allocated_min = std::min(point_.allocated_min, allocated);
  point_.allocated_max = std::max(point_.allocated_max, allocated);
  point_.reserved_max = std::max(point_.reserved_max, state.reserved());
  if ((index + 1 - window_.begin) % bucket_ == 0 || index + 1 == window_.end) Close(index, state);
}

void ViewSeriesBuilder::Close(std::size_t index, const LiveState& state) {
  point_.index = index;
  point_.time_us = trace_.events[index].time_us;
  point_.step_pos = StepPosition(steps_, trace_.events.size(), index);
  point_.allocated_end = state.allocated();
  out_.points.push_back(point_);
  for (std::size_t k = 0; k < top_sites_.size(); ++k) {
    out_.site_values[k].push_back(state.site_live()[top_sites_[k]]);
  }
  open_ = false;
}

}  // namespace gpumem::report
