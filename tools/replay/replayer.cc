#include "tools/replay/replayer.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
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

// One replay of a trace's events on an allocator: the blocks live now and the result so far.
class EventReplay {
 public:
  EventReplay(const trace::Trace& trace, absl::string_view policy, Backend& backend,
              DeviceAllocator& allocator, const AllocObserver& on_alloc)
      : trace_(trace), policy_(policy), backend_(backend), allocator_(allocator),
        on_alloc_(on_alloc), effective_free_(EffectiveFrees(trace.events)),
        step_start_(CountsNow(backend, allocator)) {
    result_.policy = std::string(policy);
    live_.reserve(1024);
  }

  // Replays event i; an error only for a failure that is not an OOM (an OOM ends the
  // replay and is in the result).
  absl::Status Apply(std::size_t i) {
    const trace::Event& e = trace_.events[i];
    switch (e.action) {
      case Action::kAlloc:
        return Alloc(i, e);
      case Action::kFreeRequested:
      case Action::kFreeCompleted:
        Free(i, e);
        return absl::OkStatus();
      default:  // segment events, OOMs, annotations: what the recording allocator did
        return absl::OkStatus();
    }
  }

  bool out_of_memory() const { return result_.oom.has_value(); }

  // The device activity since the last step end is one step.
  void EndStep() {
    const DeviceActivity now = CountsNow(backend_, allocator_);
    result_.steps.push_back(Since(now, step_start_));
    step_start_ = now;
  }

  ReplayResult Finish(double seconds, std::optional<std::size_t> warmup_steps) {
    if (!result_.oom) result_.events = trace_.events.size();
    result_.seconds = seconds;
    EndStep();
    const std::size_t steps = result_.steps.size();
    result_.warmup_steps = std::min(warmup_steps.value_or(steps / 2), steps);
    for (std::size_t k = 0; k < steps; ++k) {
      result_.total += result_.steps[k];
      if (k >= result_.warmup_steps) result_.steady += result_.steps[k];
    }
    result_.peak_reserved = backend_.counters().peak_physical_bytes;
    result_.ratio = result_.peak_allocated == 0
                        ? 0.0
                        : static_cast<double>(result_.peak_reserved) / result_.peak_allocated;
    return std::move(result_);
  }

 private:
  absl::Status Alloc(std::size_t i, const trace::Event& e) {
    auto [it, inserted] = live_.try_emplace(e.addr, LiveBlock{0, e.size});
    if (!inserted) {  // trace/unpaired_events.h: the earlier block is taken as freed
      ++result_.reused_addresses;
      allocator_.Free(it->second.ptr);
      allocated_ -= it->second.size;
      it->second = LiveBlock{0, e.size};
    }
    absl::StatusOr<DevicePtr> ptr = allocator_.Allocate(e.size, e.stream);
    if (!ptr.ok()) {
      live_.erase(it);
      if (!absl::IsResourceExhausted(ptr.status())) {
        return absl::InternalError(EventError(
            trace_, i, absl::StrCat("policy ", policy_, " failed: ", ptr.status().message())));
      }
      const OomReport report = allocator_.last_oom();
      result_.oom = ReplayOom{i, e.size, report.allocated_bytes, report.reserved_bytes,
                              report.largest_free_bytes};
      result_.events = i;
      return absl::OkStatus();
    }
    it->second.ptr = *ptr;
    if (on_alloc_) on_alloc_(i, *ptr);
    allocated_ += e.size;
    result_.peak_allocated = std::max(result_.peak_allocated, allocated_);
    return absl::OkStatus();
  }

  void Free(std::size_t i, const trace::Event& e) {
    auto it = live_.find(e.addr);
    if (it == live_.end()) {  // trace/unpaired_events.h: ignored
      ++result_.unmatched_frees;
      return;
    }
    if (!effective_free_[i]) return;
    allocator_.Free(it->second.ptr);
    allocated_ -= it->second.size;
    live_.erase(it);
  }

  const trace::Trace& trace_;
  const absl::string_view policy_;
  Backend& backend_;
  DeviceAllocator& allocator_;
  const AllocObserver& on_alloc_;
  const std::vector<bool> effective_free_;
  absl::flat_hash_map<std::uint64_t, LiveBlock> live_;  // trace addr -> our block
  std::uint64_t allocated_ = 0;
  DeviceActivity step_start_;
  ReplayResult result_;
};

// ReplayOn, calling `tick(i)` after each trace event i (null: never).
absl::StatusOr<ReplayResult> RunReplay(const trace::Trace& trace, absl::string_view policy,
                                       Backend& backend, const AllocObserver& on_alloc,
                                       const ReplayOptions& options,
                                       const std::function<void(std::size_t)>& tick) {
  if (trace.events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(trace.source, ": the trace has no events"));
  }
  absl::StatusOr<std::unique_ptr<DeviceAllocator>> made =
      MakePolicy(policy, backend, {.page_bytes = options.page_bytes});
  if (!made.ok()) return made.status();
  const auto start = std::chrono::steady_clock::now();
  EventReplay replay(trace, policy, backend, **made, on_alloc);
  const std::vector<std::size_t>& step_ends = options.step_ends;
  std::size_t next_end = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    for (; next_end < step_ends.size() && step_ends[next_end] <= i; ++next_end) replay.EndStep();
    if (absl::Status applied = replay.Apply(i); !applied.ok()) return applied;
    if (replay.out_of_memory()) break;
    if (tick) tick(i);
  }
  return replay.Finish(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      options.warmup_steps);
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
