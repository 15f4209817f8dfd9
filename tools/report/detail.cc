#include "tools/report/detail.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "tools/report/live_state.h"

namespace gpumem::report {
namespace {

// Leak suspects first (they are what the reader came for), then the sites holding most
// at their own peak.
std::vector<std::uint32_t> PickTopSites(const Report& r, std::size_t count) {
  std::vector<std::uint32_t> out;
  for (const LeakSuspect& s : r.leaks.suspects) {
    if (out.size() < count) out.push_back(s.site);
  }
  std::vector<std::uint32_t> rest;
  for (std::uint32_t s = 0; s < r.timeline.sites.size(); ++s) {
    if (r.timeline.sites[s].peak_live > 0 && std::find(out.begin(), out.end(), s) == out.end()) rest.push_back(s);
  }
  std::sort(rest.begin(), rest.end(), [&](std::uint32_t a, std::uint32_t b) {
    return r.timeline.sites[a].peak_live > r.timeline.sites[b].peak_live;
  });
  for (std::uint32_t s : rest) {
    if (out.size() >= count) break;
    out.push_back(s);
  }
  return out;
}

LiveSnapshot Capture(const LiveState& state, std::size_t index, int device) {
  LiveSnapshot snap;
  snap.index = index;
  absl::flat_hash_map<std::uint32_t, std::uint64_t> by_stack;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;  // addr, size on the device
  for (const auto& [key, block] : state.blocks()) {
    by_stack[block.stack] += block.size;
    if (LiveState::DeviceOfKey(key) == device) blocks.emplace_back(LiveState::AddrOfKey(key), block.size);
  }
  snap.bytes_by_stack.assign(by_stack.begin(), by_stack.end());
  std::sort(snap.bytes_by_stack.begin(), snap.bytes_by_stack.end());
  std::sort(blocks.begin(), blocks.end());
  auto b = blocks.begin();
  for (const auto& [begin, end] : state.ranges(device).ranges()) {
    LiveSnapshot::Segment seg{begin, end - begin, {}};
    while (b != blocks.end() && b->first < begin) ++b;
    for (auto c = b; c != blocks.end() && c->first < end; ++c) {
      seg.blocks.emplace_back(c->first - begin, std::min(c->second, end - c->first));
    }
    snap.segments.push_back(std::move(seg));
  }
  return snap;
}

}  // namespace

// The windows of one point an event: around the peak, and the first OOM unless it is
// inside the peak's. None when the whole view has a point an event already.
std::vector<ViewWindow> DetailWindows(const Report& r, std::size_t events, std::size_t view_points) {
  const std::size_t n = r.trace->events.size();
  std::vector<ViewWindow> windows;
  if (events == 0 || n <= std::max(events, view_points)) return windows;
  windows.push_back(DetailWindow(n, r.timeline.peak_allocated_index, events));
  if (!r.timeline.ooms.empty()) {
    const std::size_t oom = r.timeline.ooms.front().index;
    if (oom < windows[0].begin || oom >= windows[0].end) windows.push_back(DetailWindow(n, oom, events));
  }
  return windows;
}

Detail BuildDetail(const Report& r, std::size_t view_points, std::size_t top_sites,
                   std::size_t detail_events) {
  Detail d;
  d.top_sites = PickTopSites(r, top_sites);
  const trace::Trace& t = *r.trace;
  const std::size_t n = t.events.size();
  if (n == 0) return d;
  ViewSeriesBuilder view(t, r.steps, d.top_sites, ViewWindow{0, n, view_points});
  std::vector<ViewSeriesBuilder> details;
  for (const ViewWindow& w : DetailWindows(r, detail_events, view_points)) details.emplace_back(t, r.steps, d.top_sites, w);
  const std::size_t peak_at = r.timeline.peak_allocated_index + 1;  // after the peak alloc
  // SIZE_MAX: no OOM to capture (a plain value keeps gcc's maybe-uninitialized quiet).
  const std::size_t oom_at = r.timeline.ooms.empty() ? SIZE_MAX : r.timeline.ooms.front().index;
  const int oom_device = r.timeline.ooms.empty() ? 0 : r.timeline.ooms.front().device;
  const int peak_device = t.events[r.timeline.peak_allocated_index].device;
  LiveState state(r.sites);
  for (std::size_t i = 0; i <= n; ++i) {
    if (i == peak_at) d.at_peak = Capture(state, i, peak_device);
    if (i == oom_at) d.at_oom = Capture(state, i, oom_device);
    if (i == n) break;
    state.Apply(t.events[i]);
    view.Observe(i, state);
    for (ViewSeriesBuilder& detail : details) detail.Observe(i, state);
  }
  d.view = view.Take();
  for (ViewSeriesBuilder& detail : details) d.detail_views.push_back(detail.Take());
  return d;
}

}  // namespace gpumem::report
