// One pass over a trace that gathers everything the analyses need: memory over time
// (downsampled to a few thousand points), per-site live bytes at each step end, the
// peak, and the state at each OOM.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/report/sites.h"
#include "tools/report/steps.h"
#include "tools/report/verdict_rules.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

struct SeriesPoint {
  std::size_t index = 0;  // the last event of the bucket
  std::int64_t time_us = 0;
  std::uint64_t allocated_max = 0;  // highest within the bucket, so no peak is lost
  std::uint64_t reserved_max = 0;
  std::uint64_t allocated_end = 0;
  std::uint64_t reserved_end = 0;
};

struct OomPoint {
  std::size_t index = 0;
  std::int64_t time_us = 0;
  int device = 0;
  std::size_t step = 0;  // 0-based
  std::uint64_t request = 0;
  Keeper request_keeper = Keeper::kNone;  // the library whose code made the request
  std::uint64_t allocated = 0;  // on the device, just before the failed request
  std::uint64_t reserved = 0;
  std::uint64_t largest_free_piece = 0;  // inside held segments
  std::uint64_t free_in_segments = 0;
  std::uint64_t device_free = 0;  // what the driver said was free
  std::uint64_t headroom = 0;     // gpumem's headroom, where keeping it refused the request
  // Live bytes per site at the OOM, every device's, and on the OOM's device; empty for
  // an OOM between the first 50 and the latest 50 of a run that caught many.
  std::vector<std::uint64_t> site_live;
  std::vector<std::uint64_t> site_live_on_device;
  // The site whose blocks a helper thread kept (HelperThreads::Kept), named; empty: none.
  std::string helper_site;
  HelperKept helper_kept;
  // What it left behind: the device's state at the first step end after it (the trace's
  // end when no step ends after it). A caught OOM can leave the cache full of idle memory.
  std::uint64_t allocated_after = 0;
  std::uint64_t reserved_after = 0;
  bool after_is_step_end = false;
  std::uint64_t allocs_after = 0;  // successful allocations after it, to the trace's end
  // The event index of the first of them (SIZE_MAX: none).
  std::size_t first_alloc_after = static_cast<std::size_t>(-1);
};

struct SiteTotals {
  std::uint64_t allocs = 0;
  std::size_t first_event = 0;
  std::uint64_t live_blocks_at_end = 0;  // never freed within the trace
  std::uint64_t live_bytes_at_end = 0;
  // The stack that holds most of the site's live bytes at the last step end: a leak is
  // shown with the stack of what leaked, not of the site's first allocation (a site can mix freed and kept blocks,
  // e.g. a forward op's outputs and, attributed to it, its backward's gradients).
  std::uint32_t leaked_stack = 0;
  // The call (a frame, as sites are named) through which that stack came where the site's
  // block freed last came another way (CallApart); else, for it or a graph pool's capture,
  // the call into the site's function where that call returned while the blocks stayed
  // (CallReturns); empty if none.
  std::string kept_through;
  std::uint64_t peak_live = 0;
  bool holds_graph_pools = false;  // its blocks were captured into CUDA graph pools
};

struct Timeline {
  std::size_t events = 0;
  std::int64_t first_time_us = 0;
  std::int64_t last_time_us = 0;
  std::vector<SeriesPoint> series;
  bool has_segments = false;  // reserved is known
  std::uint64_t peak_allocated = 0;
  std::size_t peak_allocated_index = 0;
  std::uint64_t peak_reserved = 0;
  std::vector<OomPoint> ooms;
  std::vector<SiteTotals> sites;
  // Step-end samples: sample j is the end of step sample_step[j] (0-based).
  std::vector<std::size_t> sample_step;
  std::vector<std::uint64_t> sample_allocated;
  // [site][sample]: the least the site held during the step that ends at the sample:
  // what it kept all through the step (what a leak grows).
  std::vector<std::vector<std::uint64_t>> site_samples;
  std::vector<std::uint64_t> step_peak_allocated;        // [step]: highest within it
  // Per device (pinned host memory, device -1, apart), for a process that drives several.
  struct DevicePeaks {
    std::uint64_t allocated = 0;
    std::uint64_t reserved = 0;
    std::vector<std::uint64_t> step_allocated;  // [step]: highest within it
  };
  std::vector<DevicePeaks> devices;  // by device index; empty for one that allocated nothing
  // [site]: the device that held most of the site's bytes at the trace's end.
  std::vector<std::int32_t> site_device;
  // The highest allocated within `step` on `device` (all devices: -1).
  std::uint64_t StepPeak(std::int32_t device, std::size_t step) const;
  // How many devices allocated anything.
  std::size_t DevicesUsed() const;
  std::uint64_t unmatched_frees = 0;
  std::uint64_t reused_addresses = 0;  // allocs at a live address (trace/unpaired_events.h)
  std::uint64_t allocs = 0;  // successful allocations in the trace
};

using Progress = std::function<void(double fraction)>;

// `points`: how many points the downsampled series may hold.
Timeline BuildTimeline(const trace::Trace& trace, const SiteTable& sites, const Steps& steps,
                       std::size_t points = 2000, const Progress& progress = nullptr);

}  // namespace gpumem::report
