#include "tools/report/timeline.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "tools/report/live_state.h"

namespace gpumem::report {

using trace::Action;

Timeline BuildTimeline(const trace::Trace& trace, const SiteTable& sites, const Steps& steps,
                       std::size_t points, const Progress& progress) {
  Timeline t;
  const std::size_t n = trace.events.size();
  t.events = n;
  if (n == 0) return t;
  t.first_time_us = trace.events.front().time_us;
  t.last_time_us = trace.events.back().time_us;
  t.sites.resize(sites.size());
  t.site_samples.resize(sites.size());
  t.step_peak_allocated.assign(std::max<std::size_t>(steps.count, 1) + 1, 0);
  const std::size_t bucket = std::max<std::size_t>(1, (n + points - 1) / std::max<std::size_t>(points, 1));

  LiveState state(sites);
  // Per-site samples cost sites x samples: past kMaxSamples step ends, sample every k-th
  // (the fit needs the trend, not every step), always including the last.
  constexpr std::size_t kMaxSamples = 1000;
  const std::size_t sample_stride = std::max<std::size_t>(1, (steps.ends.size() + kMaxSamples - 1) / kMaxSamples);
  std::size_t next_end = 0;  // index into steps.ends
  std::size_t step = 0;
  SeriesPoint point;
  // Each site's stack holding most of its live bytes at the last step end (what the
  // leak analysis measures; by the trace's end a process may have freed everything).
  bool noted_leaked = false;
  auto note_leaked_stacks = [&] {
    noted_leaked = true;
    absl::flat_hash_map<std::uint32_t, std::uint64_t> by_stack;
    for (const auto& [key, block] : state.blocks()) by_stack[block.stack] += block.size;
    std::vector<std::uint64_t> best_bytes(t.sites.size(), 0);
    for (const auto& [stack, bytes] : by_stack) {
      const std::uint32_t s = sites.site_of_stack(stack);
      std::uint32_t& best = t.sites[s].leaked_stack;
      if (bytes > best_bytes[s] || (bytes == best_bytes[s] && stack < best)) {
        best = stack;
        best_bytes[s] = bytes;
      }
    }
  };
  auto take_sample = [&] {
    if (next_end + 1 == steps.ends.size()) note_leaked_stacks();
    if (next_end % sample_stride != 0 && next_end + 1 != steps.ends.size()) return;
    t.sample_step.push_back(step);
    t.sample_allocated.push_back(state.allocated());
    const std::vector<std::uint64_t>& live = state.site_live();
    for (std::size_t s = 0; s < live.size(); ++s) t.site_samples[s].push_back(live[s]);
  };
  for (std::size_t i = 0; i < n; ++i) {
    while (next_end < steps.ends.size() && steps.ends[next_end] == i) {
      take_sample();
      ++next_end;
      ++step;
    }
    const trace::Event& e = trace.events[i];
    if (e.action == Action::kOom) {
      OomPoint oom;
      oom.index = i;
      oom.time_us = e.time_us;
      oom.device = e.device;
      oom.step = step;
      oom.request = e.size;
      oom.allocated = state.allocated_on(e.device);
      oom.reserved = state.reserved_on(e.device);
      oom.device_free = e.device_free;
      if (t.ooms.size() < 100) {  // the layout walk is per OOM; a storm of them needs few
        FreePieces free = state.FreePiecesOn(e.device);
        oom.largest_free_piece = free.largest;
        oom.free_in_segments = free.total;
        oom.site_live = state.site_live();
      }
      t.ooms.push_back(std::move(oom));
    }
    state.Apply(e);
    if (e.action == Action::kAlloc) {
      SiteTotals& site = t.sites[sites.site_of_stack(e.stack_id)];
      if (site.allocs++ == 0) site.first_event = i;
      const std::uint32_t id = sites.site_of_stack(e.stack_id);
      site.peak_live = std::max(site.peak_live, state.site_live()[id]);
      if (state.allocated() > t.peak_allocated) {
        t.peak_allocated = state.allocated();
        t.peak_allocated_index = i;
      }
      std::uint64_t& step_peak = t.step_peak_allocated[std::min(step, t.step_peak_allocated.size() - 1)];
      step_peak = std::max(step_peak, state.allocated());
    }
    t.peak_reserved = std::max(t.peak_reserved, state.reserved());
    point.allocated_max = std::max(point.allocated_max, state.allocated());
    point.reserved_max = std::max(point.reserved_max, state.reserved());
    if ((i + 1) % bucket == 0 || i + 1 == n) {
      point.index = i;
      point.time_us = e.time_us;
      point.allocated_end = state.allocated();
      point.reserved_end = state.reserved();
      t.series.push_back(point);
      point = SeriesPoint{};
    }
    if (progress && (i & 0xfffff) == 0) progress(static_cast<double>(i) / n);
  }
  // Steps ending after the last event (a marker as the final record) still count.
  while (next_end < steps.ends.size()) {
    take_sample();
    ++next_end;
    ++step;
  }
  for (const auto& [key, block] : state.blocks()) {
    t.sites[block.site].live_blocks_at_end++;
    t.sites[block.site].live_bytes_at_end += block.size;
  }
  if (!noted_leaked) note_leaked_stacks();
  t.has_segments = state.saw_segments();
  t.unmatched_frees = state.unmatched_frees();
  if (progress) progress(1.0);
  return t;
}

}  // namespace gpumem::report
