#include "tools/replay/replayer.h"

#include <chrono>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/device_allocator.h"
#include "allocator/policies.h"
#include "allocator/sim_backend.h"

namespace gpumem::replay {
namespace {

using trace::Action;

// Effectively unlimited, yet far below what would overflow byte arithmetic.
constexpr std::uint64_t kDefaultCapacity = std::uint64_t{1} << 50;

// PyTorch emits free_requested when the program drops a block and free_completed when
// queued work on other streams is done with it; the memory is reusable only then. A
// free_requested counts as the free only if no free_completed follows for that block
// (older recorders, or a ring buffer that cut it off). Marks the events that free.
std::vector<bool> EffectiveFrees(const std::vector<trace::Event>& events) {
  std::vector<bool> frees(events.size(), false);
  absl::flat_hash_map<std::uint64_t, std::size_t> pending;  // addr -> free_requested index
  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace::Event& e = events[i];
    switch (e.action) {
      case Action::kFreeRequested:
        pending[e.addr] = i;
        break;
      case Action::kFreeCompleted:
        pending.erase(e.addr);
        frees[i] = true;
        break;
      case Action::kAlloc:
        // The address is handed out again: a request never completed was the free.
        if (auto it = pending.find(e.addr); it != pending.end()) {
          frees[it->second] = true;
          pending.erase(it);
        }
        break;
      default:
        break;
    }
  }
  for (const auto& [addr, index] : pending) frees[index] = true;
  return frees;
}

struct LiveBlock {
  DevicePtr ptr;
  std::uint64_t size;
};

std::string EventError(const trace::Trace& trace, std::size_t index, absl::string_view what) {
  return absl::StrCat(trace.source, ": event ", index, ": ", what);
}

}  // namespace

absl::StatusOr<ReplayResult> ReplayOn(const trace::Trace& trace, absl::string_view policy,
                                      Backend& backend, const AllocObserver& on_alloc) {
  if (trace.events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(trace.source, ": the trace has no events"));
  }
  absl::StatusOr<std::unique_ptr<DeviceAllocator>> made = MakePolicy(policy, backend);
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

  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace::Event& e = events[i];
    switch (e.action) {
      case Action::kAlloc: {
        auto [it, inserted] = live.try_emplace(e.addr, LiveBlock{0, e.size});
        if (!inserted) {
          return absl::InvalidArgumentError(EventError(
              trace, i, absl::StrFormat("alloc at address 0x%x, which is already live", e.addr)));
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
        if (it == live.end()) {
          return absl::InvalidArgumentError(EventError(
              trace, i, absl::StrFormat("%s of address 0x%x, which is not live",
                                        trace::ActionName(e.action), e.addr)));
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
  }
  if (!result.oom) result.events = events.size();
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.peak_reserved = backend.counters().peak_physical_bytes;
  result.ratio = result.peak_allocated == 0
                     ? 0.0
                     : static_cast<double>(result.peak_reserved) / result.peak_allocated;
  return result;
}

absl::StatusOr<ReplayResult> Replay(const trace::Trace& trace, absl::string_view policy,
                                    const ReplayOptions& options) {
  SimBackendOptions sim;
  sim.capacity = options.capacity.value_or(kDefaultCapacity);
  sim.events = SimBackendOptions::Events::kImmediate;
  SimBackend backend(sim);
  return ReplayOn(trace, policy, backend);
}

}  // namespace gpumem::replay
