#include "tools/replay/replayer.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/device_allocator.h"
#include "allocator/policies.h"
#include "allocator/sim_backend.h"
#include "tools/replay/effective_frees.h"

namespace gpumem::replay {
namespace {

using trace::Action;

// Effectively unlimited, yet far below what would overflow byte arithmetic.
constexpr std::uint64_t kDefaultCapacity = std::uint64_t{1} << 50;

struct LiveBlock {
  DevicePtr ptr;
  std::uint64_t size;
};

// Cumulative counts so far; a step's activity is the difference at its two ends.
DeviceActivity CountsNow(const Backend& backend, const DeviceAllocator& allocator) {
  const BackendCounters c = backend.counters();
  DeviceActivity d;
  d.maps = c.maps;
  d.unmaps = c.unmaps;
  d.synchronizes = c.synchronizes;
  d.stream_waits = c.stream_waits;
  d.physical_creates = c.physical_creates;
  d.segment_allocs = c.segment_allocs;
  d.segment_frees = c.segment_frees;
  d.stitches = allocator.stats().stitch_count;
  return d;
}

DeviceActivity Since(const DeviceActivity& now, const DeviceActivity& then) {
  DeviceActivity d;
  d.maps = now.maps - then.maps;
  d.unmaps = now.unmaps - then.unmaps;
  d.synchronizes = now.synchronizes - then.synchronizes;
  d.stream_waits = now.stream_waits - then.stream_waits;
  d.physical_creates = now.physical_creates - then.physical_creates;
  d.segment_allocs = now.segment_allocs - then.segment_allocs;
  d.segment_frees = now.segment_frees - then.segment_frees;
  d.stitches = now.stitches - then.stitches;
  return d;
}

std::string EventError(const trace::Trace& trace, std::size_t index, absl::string_view what) {
  return absl::StrCat(trace.source, ": event ", index, ": ", what);
}

}  // namespace

DeviceActivity& DeviceActivity::operator+=(const DeviceActivity& o) {
  maps += o.maps;
  unmaps += o.unmaps;
  synchronizes += o.synchronizes;
  stream_waits += o.stream_waits;
  physical_creates += o.physical_creates;
  segment_allocs += o.segment_allocs;
  segment_frees += o.segment_frees;
  stitches += o.stitches;
  return *this;
}

std::vector<std::size_t> EqualStepEnds(std::size_t events, std::size_t parts) {
  std::vector<std::size_t> ends;
  for (std::size_t k = 1; k < parts; ++k) ends.push_back(events * k / parts);
  return ends;
}

namespace {

// ReplayOn, calling `tick(i)` after each trace event i (null: never).
absl::StatusOr<ReplayResult> RunReplay(const trace::Trace& trace, absl::string_view policy,
                                       Backend& backend, const AllocObserver& on_alloc,
                                       const ReplayOptions& options,
                                       const std::function<void(std::size_t)>& tick) {
  if (trace.events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(trace.source, ": the trace has no events"));
  }
  absl::StatusOr<std::unique_ptr<DeviceAllocator>> made = MakePolicy(policy, backend, {.page_bytes = options.page_bytes});
  if (!made.ok()) return made.status();
  DeviceAllocator& allocator = **made;

  const auto start = std::chrono::steady_clock::now();
  const std::vector<trace::Event>& events = trace.events;
  const std::vector<bool> effective_free = EffectiveFrees(events);

  ReplayResult result;
  result.policy = std::string(policy);
  absl::flat_hash_map<std::uint64_t, LiveBlock> live;  // trace addr -> our block
  live.reserve(1024);
  std::uint64_t allocated = 0;
  const std::vector<std::size_t>& step_ends = options.step_ends;
  std::size_t next_end = 0;
  DeviceActivity step_start = CountsNow(backend, allocator);
  auto end_step = [&] {
    const DeviceActivity now = CountsNow(backend, allocator);
    result.steps.push_back(Since(now, step_start));
    step_start = now;
  };

  for (std::size_t i = 0; i < events.size(); ++i) {
    while (next_end < step_ends.size() && step_ends[next_end] <= i) {
      end_step();
      ++next_end;
    }
    const trace::Event& e = events[i];
    switch (e.action) {
      case Action::kAlloc: {
        auto [it, inserted] = live.try_emplace(e.addr, LiveBlock{0, e.size});
        if (!inserted) {  // trace/unpaired_events.h: the earlier block is taken as freed
          ++result.reused_addresses;
          allocator.Free(it->second.ptr);
          allocated -= it->second.size;
          it->second = LiveBlock{0, e.size};
        }
        absl::StatusOr<DevicePtr> ptr = allocator.Allocate(e.size, e.stream);
        if (!ptr.ok()) {
          live.erase(it);
          if (!absl::IsResourceExhausted(ptr.status())) {
            return absl::InternalError(EventError(
                trace, i, absl::StrCat("policy ", policy, " failed: ", ptr.status().message())));
          }
          const OomReport report = allocator.last_oom();
          result.oom = ReplayOom{i, e.size, report.allocated_bytes, report.reserved_bytes,
                                 report.largest_free_bytes};
          result.events = i;
          break;
        }
        it->second.ptr = *ptr;
        if (on_alloc) on_alloc(i, *ptr);
        allocated += e.size;
        if (allocated > result.peak_allocated) result.peak_allocated = allocated;
        break;
      }
      case Action::kFreeRequested:
      case Action::kFreeCompleted: {
        auto it = live.find(e.addr);
        if (it == live.end()) {  // trace/unpaired_events.h: ignored
          ++result.unmatched_frees;
          break;
        }
        if (!effective_free[i]) break;
        allocator.Free(it->second.ptr);
        allocated -= it->second.size;
        live.erase(it);
        break;
      }
      default:  // segment events, OOMs, annotations: what the recording allocator did
        break;
    }
    if (result.oom) break;
    if (tick) tick(i);
  }
  if (!result.oom) result.events = events.size();
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  end_step();
  result.warmup_steps =
      std::min(options.warmup_steps.value_or(result.steps.size() / 2), result.steps.size());
  for (std::size_t k = 0; k < result.steps.size(); ++k) {
    result.total += result.steps[k];
    if (k >= result.warmup_steps) result.steady += result.steps[k];
  }
  result.peak_reserved = backend.counters().peak_physical_bytes;
  result.ratio = result.peak_allocated == 0
                     ? 0.0
                     : static_cast<double>(result.peak_reserved) / result.peak_allocated;
  return result;
}

// Completes each stream's events `lag` trace events after they were recorded.
class LaggingDevice {
 public:
  LaggingDevice(SimBackend& sim, std::size_t lag) : sim_(sim), lag_(lag) {}
  void operator()(std::size_t) {
    recorded_.push_back(sim_.RecordedEvents());
    if (recorded_.size() <= lag_) return;
    for (const auto& [stream, events] : recorded_.front()) sim_.CompleteStreamUpTo(stream, events);
    recorded_.pop_front();
  }

 private:
  SimBackend& sim_;
  const std::size_t lag_;
  std::deque<std::vector<std::pair<StreamId, std::uint64_t>>> recorded_;
};

}  // namespace

absl::StatusOr<ReplayResult> ReplayOn(const trace::Trace& trace, absl::string_view policy,
                                      Backend& backend, const AllocObserver& on_alloc,
                                      const ReplayOptions& options) {
  return RunReplay(trace, policy, backend, on_alloc, options, nullptr);
}

std::uint64_t PeakAllocated(const trace::Trace& trace) {
  const std::vector<bool> effective_free = EffectiveFrees(trace.events);
  absl::flat_hash_map<std::uint64_t, std::uint64_t> live;  // addr -> size
  std::uint64_t allocated = 0;
  std::uint64_t peak = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const trace::Event& e = trace.events[i];
    if (e.action == Action::kAlloc) {
      if (!live.try_emplace(e.addr, e.size).second) continue;  // Replay reports it
      allocated += e.size;
      peak = std::max(peak, allocated);
    } else if (effective_free[i]) {
      auto it = live.find(e.addr);
      if (it == live.end()) continue;
      allocated -= it->second;
      live.erase(it);
    }
  }
  return peak;
}

absl::StatusOr<ReplayResult> Replay(const trace::Trace& trace, absl::string_view policy,
                                    const ReplayOptions& options, const AllocObserver& on_alloc) {
  SimBackendOptions sim;
  sim.capacity = options.capacity.value_or(kDefaultCapacity);
  sim.events = options.device_lag == 0 ? SimBackendOptions::Events::kImmediate
                                        : SimBackendOptions::Events::kManual;
  SimBackend backend(sim);
  if (options.device_lag == 0) return ReplayOn(trace, policy, backend, on_alloc, options);
  LaggingDevice lagging(backend, options.device_lag);
  return RunReplay(trace, policy, backend, on_alloc, options, std::ref(lagging));
}

}  // namespace gpumem::replay
