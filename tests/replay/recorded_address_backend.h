// A test oracle: a SimBackend whose segments sit at the addresses PyTorch's cudaMalloc
// returned while the trace was recorded. PyTorch's best fit breaks ties between free
// blocks of equal size by address, so with the recorded addresses an exact emulation
// must hand out every block at the very address the trace names.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/sim_backend.h"
#include "tools/trace/trace.h"

namespace gpumem::replay::testing {

class RecordedAddressBackend final : public Backend {
 public:
  // `first` is the address of a segment that existed before the recording began (the
  // warm-up's), handed out on the first AllocateSegment call.
  RecordedAddressBackend(const trace::Trace& trace, DevicePtr first) {
    recorded_.push_back({first, 0});
    for (const trace::Event& e : trace.events) {
      if (e.action == trace::Action::kSegmentAlloc) recorded_.push_back({e.addr, e.size});
    }
  }

  // Segments whose size differed from the recorded one at the same position, or that
  // came after the recorded ones ran out.
  std::size_t diverged_segments() const { return diverged_; }
  // Recorded segments (the warm-up's included) the replay never asked for.
  std::size_t unused_segments() const { return recorded_.size() - std::min(next_, recorded_.size()); }

  absl::StatusOr<DevicePtr> AllocateSegment(std::size_t bytes) override {
    absl::StatusOr<DevicePtr> ours = sim_.AllocateSegment(bytes);
    if (!ours.ok()) return ours;
    DevicePtr given = *ours;  // where the recording and the replay part ways
    if (next_ < recorded_.size() &&
        (recorded_[next_].size == bytes || (next_ == 0 && bytes == (2u << 20)))) {
      given = recorded_[next_].addr;
    } else {
      ++diverged_;
    }
    ++next_;
    to_sim_[given] = *ours;
    return given;
  }
  void FreeSegment(DevicePtr ptr, std::size_t bytes) override {
    auto it = to_sim_.find(ptr);
    sim_.FreeSegment(it->second, bytes);
    to_sim_.erase(it);
  }

  std::size_t granularity() const override { return sim_.granularity(); }
  std::uint64_t capacity() const override { return sim_.capacity(); }
  bool supports_vmm() const override { return false; }
  absl::StatusOr<DevicePtr> ReserveAddressRange(std::size_t) override {
    return absl::UnimplementedError("segments only");
  }
  void ReleaseAddressRange(DevicePtr, std::size_t) override {}
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::size_t) override {
    return absl::UnimplementedError("segments only");
  }
  void ReleasePhysical(PhysicalHandle) override {}
  absl::Status Map(DevicePtr, std::size_t, PhysicalHandle, std::size_t) override {
    return absl::UnimplementedError("segments only");
  }
  absl::Status Unmap(DevicePtr, std::size_t) override { return absl::OkStatus(); }
  EventHandle RecordEvent(StreamId stream) override { return sim_.RecordEvent(stream); }
  absl::Status StreamWaitEvent(StreamId waiter, EventHandle event) override {
    return sim_.StreamWaitEvent(waiter, event);
  }
  bool EventCompleted(EventHandle event) override { return sim_.EventCompleted(event); }
  void ReleaseEvent(EventHandle event) override { sim_.ReleaseEvent(event); }
  void Synchronize() override { sim_.Synchronize(); }
  BackendCounters counters() const override { return sim_.counters(); }

 private:
  struct Recorded {
    DevicePtr addr;
    std::uint64_t size;
  };
  SimBackend sim_;
  std::vector<Recorded> recorded_;
  std::size_t next_ = 0;
  std::size_t diverged_ = 0;
  absl::flat_hash_map<DevicePtr, DevicePtr> to_sim_;
};

}  // namespace gpumem::replay::testing
