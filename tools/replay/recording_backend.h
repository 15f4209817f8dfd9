// A Backend that passes every call to another one and remembers the device memory a
// policy obtained (segment sizes in order), so replay can be checked against the
// segment_alloc events PyTorch itself recorded.
#pragma once

#include <cstdint>
#include <vector>

#include "allocator/backend.h"

namespace gpumem::replay {

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(Backend& inner) : inner_(inner) {}

  // Sizes of AllocateSegment calls that succeeded, in order.
  const std::vector<std::uint64_t>& segment_allocs() const { return segment_allocs_; }
  // Sizes of CreatePhysical calls that succeeded, in order (expandable segments' pages).
  const std::vector<std::uint64_t>& physical_creates() const { return physical_creates_; }

  std::size_t granularity() const override { return inner_.granularity(); }
  std::uint64_t capacity() const override { return inner_.capacity(); }
  bool supports_vmm() const override { return inner_.supports_vmm(); }
  absl::StatusOr<DevicePtr> ReserveAddressRange(std::size_t bytes) override {
    return inner_.ReserveAddressRange(bytes);
  }
  void ReleaseAddressRange(DevicePtr base, std::size_t bytes) override {
    inner_.ReleaseAddressRange(base, bytes);
  }
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::size_t bytes) override {
    absl::StatusOr<PhysicalHandle> h = inner_.CreatePhysical(bytes);
    if (h.ok()) physical_creates_.push_back(bytes);
    return h;
  }
  void ReleasePhysical(PhysicalHandle handle) override { inner_.ReleasePhysical(handle); }
  absl::Status Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                   std::size_t offset) override {
    return inner_.Map(va, bytes, handle, offset);
  }
  absl::Status Unmap(DevicePtr va, std::size_t bytes) override {
    return inner_.Unmap(va, bytes);
  }
  absl::StatusOr<DevicePtr> AllocateSegment(std::size_t bytes) override {
    absl::StatusOr<DevicePtr> p = inner_.AllocateSegment(bytes);
    if (p.ok()) segment_allocs_.push_back(bytes);
    return p;
  }
  void FreeSegment(DevicePtr ptr, std::size_t bytes) override { inner_.FreeSegment(ptr, bytes); }
  EventHandle RecordEvent(StreamId stream) override { return inner_.RecordEvent(stream); }
  absl::Status StreamWaitEvent(StreamId waiter, EventHandle event) override {
    return inner_.StreamWaitEvent(waiter, event);
  }
  bool EventCompleted(EventHandle event) override { return inner_.EventCompleted(event); }
  void ReleaseEvent(EventHandle event) override { inner_.ReleaseEvent(event); }
  void Synchronize() override { inner_.Synchronize(); }
  BackendCounters counters() const override { return inner_.counters(); }

 private:
  Backend& inner_;
  std::vector<std::uint64_t> segment_allocs_;
  std::vector<std::uint64_t> physical_creates_;
};

}  // namespace gpumem::replay
