// A second pass for the HTML viewer, once the top sites and the moments of interest are
// known: memory over time stacked by those sites (view_series.h), and the live set (by
// stack) and the segment layout at the peak and at the first OOM.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tools/report/report.h"
#include "tools/report/view_series.h"

namespace gpumem::report {

struct LiveSnapshot {
  std::size_t index = 0;  // the state after events [0, index)
  std::vector<std::pair<std::uint32_t, std::uint64_t>> bytes_by_stack;  // stack, bytes
  struct Segment {
    std::uint64_t addr = 0;
    std::uint64_t size = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;  // offset, size
  };
  std::vector<Segment> segments;  // device of interest only
};

struct Detail {
  std::vector<std::uint32_t> top_sites;
  ViewSeries view;
  // One point an event around the peak and the first OOM, for the page's deepest zoom.
  std::vector<ViewSeries> detail_views;
  std::optional<LiveSnapshot> at_peak;
  std::optional<LiveSnapshot> at_oom;
};

// `view_points`: points over the whole trace; `detail_events`: events around the peak and
// the first OOM kept one point each (0: none).
Detail BuildDetail(const Report& report, std::size_t view_points, std::size_t top_sites = 8,
                   std::size_t detail_events = 0);

}  // namespace gpumem::report
