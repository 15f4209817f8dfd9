// The HTML page's timeline: the events cut into a fixed number of points whatever the
// trace's length, each with the lowest and highest allocated bytes within it (an
// envelope, so no peak or dip is lost), its place in steps and seconds, and the live
// bytes of the top sites at its end. The page draws from these and re-buckets them when
// zoomed, so its size and drawing time do not grow with the trace.
#pragma once

#include <cstdint>
#include <vector>

#include "tools/report/live_state.h"
#include "tools/report/steps.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

struct ViewPoint {
  std::size_t index = 0;  // the last event of the point
  std::int64_t time_us = 0;
  double step_pos = 0;  // steps completed, fractional: step k spans [k, k + 1)
  std::uint64_t allocated_min = 0;
  std::uint64_t allocated_max = 0;
  std::uint64_t allocated_end = 0;
  std::uint64_t reserved_max = 0;
};

struct ViewSeries {
  std::vector<ViewPoint> points;
  std::vector<std::vector<std::uint64_t>> site_values;  // [top site][point], at its end
};

// Where event `index` lies in steps: its step (0-based) plus how far into that step, by
// events. The last step, whose end is not seen, runs to the trace's end.
double StepPosition(const Steps& steps, std::size_t events, std::size_t index);

// Events [begin, end) of a trace, and the number of points to cut them into.
struct ViewWindow {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t points = 1;
};

// The window of `events` events centred on `index` (clamped to the trace), one point an
// event: the detail the page shows when zoomed in around the peak or an OOM.
ViewWindow DetailWindow(std::size_t trace_events, std::size_t index, std::size_t events);

// Fed every event of the trace in order, after the state has applied it; keeps those in
// its window.
class ViewSeriesBuilder {
 public:
  ViewSeriesBuilder(const trace::Trace& trace, const Steps& steps,
                    std::vector<std::uint32_t> top_sites, ViewWindow window);
  void Observe(std::size_t index, const LiveState& state);
  ViewSeries Take() { return std::move(out_); }

 private:
  void Close(std::size_t index, const LiveState& state);

  const trace::Trace& trace_;
  const Steps& steps_;
  std::vector<std::uint32_t> top_sites_;
  ViewWindow window_;
  std::size_t bucket_ = 1;
  bool open_ = false;
  ViewPoint point_;
  ViewSeries out_;
};

}  // namespace gpumem::report
