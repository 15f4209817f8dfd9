#include "tools/report/graph_pools.h"

#include <algorithm>
#include <optional>

namespace gpumem::report {

std::vector<GraphPoolMark> FindGraphPoolMarks(const trace::Trace& trace) {
  using format::GraphPoolChange;
  std::vector<GraphPoolMark> marks;
  const auto& events = trace.events;
  const auto by_time = [](const trace::Event& e, std::int64_t t) { return e.time_us < t; };
  const auto at_or_before = [](std::int64_t t, const trace::Event& e) { return t < e.time_us; };
  for (const trace::Annotation& a : trace.annotations) {
    const std::optional<format::GraphPoolNote> note = format::ParseGraphPoolNote(a.name);
    if (!note) continue;
    const auto at = note->change == GraphPoolChange::kCaptureBegins
                        ? std::lower_bound(events.begin(), events.end(), a.time_us, by_time)
                        : std::upper_bound(events.begin(), events.end(), a.time_us, at_or_before);
    marks.push_back({static_cast<std::size_t>(at - events.begin()), a.device, *note});
  }
  std::stable_sort(marks.begin(), marks.end(), [](const GraphPoolMark& x, const GraphPoolMark& y) {
    return x.before_event < y.before_event;
  });
  return marks;
}

}  // namespace gpumem::report
