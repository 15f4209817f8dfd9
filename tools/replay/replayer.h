// Replay: drive an allocation policy with the alloc/free events of a real trace, on a
// simulated device, and measure what it would have reserved. The denominator of the
// ratio is the same for every policy: the sizes in the trace's own alloc events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "allocator/backend.h"
#include "tools/trace/trace.h"

namespace gpumem::replay {

struct ReplayOptions {
  // Device memory the policy may hold; unset means practically unlimited.
  std::optional<std::uint64_t> capacity;
  // Event positions at which a training step ends, ascending (report::Steps::ends, or
  // EqualStepEnds): device activity is counted per step. Empty: the trace is one step.
  std::vector<std::size_t> step_ends;
  // Steps at the start that may still grow the pools; the rest are the steady state.
  // Unset: the first half (real runs pass their peak late: resnet50 in step 5 of 12).
  std::optional<std::size_t> warmup_steps;
  // The device runs this many trace events behind the host: an event the policy records
  // (a stream's work) completes only once the replay is that many events further on, as
  // on a GPU, where the host queues work well ahead of it. 0: at once. Replay only.
  std::size_t device_lag = 0;
  // gpumem's page (PolicySettings::page_bytes): a multiple of the simulated device's
  // 2 MiB granularity; 0: the granularity.
  std::size_t page_bytes = 0;
};

// What the policy asked of the device: on a GPU each synchronize stalls the host's
// run-ahead, an unmap waits for the device, and a map costs tens of microseconds, so a
// steady training loop should do none of them once its pools are warm.
struct DeviceActivity {
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t synchronizes = 0;      // device-wide (cuCtxSynchronize)
  std::uint64_t stream_waits = 0;      // one stream after another's event (the host goes on)
  std::uint64_t physical_creates = 0;  // new pages (cuMemCreate)
  std::uint64_t segment_allocs = 0;    // plain segments (cudaMalloc)
  std::uint64_t segment_frees = 0;
  std::uint64_t stitches = 0;          // growths served by remapped idle pages
  DeviceActivity& operator+=(const DeviceActivity& o);
  bool operator==(const DeviceActivity& o) const = default;
};

// `parts` equal slices of `events`: step ends for traces whose steps are unknown.
std::vector<std::size_t> EqualStepEnds(std::size_t events, std::size_t parts);

// The first allocation the policy could not serve; replay stops there, as training would.
struct ReplayOom {
  std::size_t event_index = 0;  // index into trace.events
  std::uint64_t requested_bytes = 0;
  std::uint64_t allocated_bytes = 0;  // from the policy's OomReport
  std::uint64_t reserved_bytes = 0;
  std::uint64_t largest_free_bytes = 0;
};

struct ReplayResult {
  std::string policy;
  std::size_t events = 0;               // trace events processed
  std::uint64_t peak_allocated = 0;     // peak of the sum of live trace alloc sizes
  std::uint64_t peak_reserved = 0;      // the backend's peak physical bytes
  double ratio = 0;                     // peak_reserved / peak_allocated (0 if nothing allocated)
  double seconds = 0;                   // wall time of the replay loop
  std::optional<ReplayOom> oom;
  // Allocs and frees that did not pair up (trace/unpaired_events.h): ignored frees, and
  // allocs at a live address whose earlier block was taken as freed.
  std::uint64_t unmatched_frees = 0;
  std::uint64_t reused_addresses = 0;
  // One entry per step (ReplayOptions::step_ends; the last runs to the end of the replay).
  std::vector<DeviceActivity> steps;
  std::size_t warmup_steps = 0;         // the first steps, not counted in `steady`
  DeviceActivity total;                 // the whole replay
  DeviceActivity steady;                // the steps after the warm-up
};

// Told of every block the policy hands out: the trace event's index and our address.
using AllocObserver = std::function<void(std::size_t event_index, DevicePtr ptr)>;

// Replays `trace` through the policy named `policy` (see allocator/policies.h) on a fresh
// SimBackend with immediate events. Errors (unknown policy, an empty trace) are one line
// naming the trace file. A free of an address that is not live is ignored and an alloc
// at a live address frees the earlier block first, as `gpumem report` does; both are
// counted in the result. `on_alloc`, if set, is told of every block handed out.
absl::StatusOr<ReplayResult> Replay(const trace::Trace& trace, absl::string_view policy,
                                    const ReplayOptions& options = {},
                                    const AllocObserver& on_alloc = {});

// The peak of the sum of live trace alloc sizes: a replay's peak_allocated without an OOM
// (to set a cap relative to it). Inconsistencies are skipped here; Replay reports them.
std::uint64_t PeakAllocated(const trace::Trace& trace);

// The same on a backend the caller provides (to observe what the policy asks of the
// device); options.capacity is ignored, the backend has its own.
absl::StatusOr<ReplayResult> ReplayOn(const trace::Trace& trace, absl::string_view policy,
                                      Backend& backend, const AllocObserver& on_alloc = {},
                                      const ReplayOptions& options = {});

}  // namespace gpumem::replay
