// A Backend for tests: forwards to a SimBackend and lets a test watch what the policy
// asks of the device (synchronizations, unmaps, events and stream waits) to check the
// safety invariants.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>

#include "allocator/sim_backend.h"

namespace gpumem::testing {

class CheckedBackend final : public Backend {
 public:
  explicit CheckedBackend(SimBackend& sim) : sim_(sim) {}

  std::function<void()> on_synchronize;                      // after the sim synchronized
  // Held across the sim's synchronize and on_synchronize where set: a check whose unmap
  // hook runs on another thread sees the device's progress and its model's together.
  std::mutex* synchronize_mu = nullptr;
  std::function<void(DevicePtr, std::size_t)> on_unmap;      // before the unmap
  std::function<void(StreamId, EventHandle)> on_record_event;  // after the sim recorded
  std::function<void(StreamId, EventHandle)> on_stream_wait;   // after the sim queued it
  std::atomic<int> synchronizations{0};
  // Called where a cuMemCreate fails, as a CUPTI callback on it would be.
  std::function<void()> on_create_failure;
  mutable std::atomic<int> free_queries{0};  // DeviceFreeBytes calls
  // Reported instead of the sim's capacity when set: a device shared with other processes
  // refuses memory below what it claims.
  std::uint64_t claimed_capacity = 0;

  std::size_t granularity() const override { return sim_.granularity(); }
  std::uint64_t capacity() const override {
    return claimed_capacity != 0 ? claimed_capacity : sim_.capacity();
  }
  bool supports_vmm() const override { return sim_.supports_vmm(); }
  absl::StatusOr<DevicePtr> ReserveAddressRange(std::size_t bytes) override {
    return sim_.ReserveAddressRange(bytes);
  }
  void ReleaseAddressRange(DevicePtr base, std::size_t bytes) override {
    sim_.ReleaseAddressRange(base, bytes);
  }
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::size_t bytes) override {
    absl::StatusOr<PhysicalHandle> h = sim_.CreatePhysical(bytes);
    if (!h.ok() && on_create_failure) on_create_failure();
    return h;
  }
  std::uint64_t DeviceFreeBytes() const override {
    ++free_queries;
    return sim_.DeviceFreeBytes();
  }
  void ReleasePhysical(PhysicalHandle handle) override { sim_.ReleasePhysical(handle); }
  absl::Status Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                   std::size_t offset) override {
    return sim_.Map(va, bytes, handle, offset);
  }
  absl::Status Unmap(DevicePtr va, std::size_t bytes) override {
    if (on_unmap) on_unmap(va, bytes);
    return sim_.Unmap(va, bytes);
  }
  absl::StatusOr<DevicePtr> AllocateSegment(std::size_t bytes) override {
    return sim_.AllocateSegment(bytes);
  }
  void FreeSegment(DevicePtr ptr, std::size_t bytes) override {
    if (on_unmap) on_unmap(ptr, bytes);
    sim_.FreeSegment(ptr, bytes);
  }
  EventHandle RecordEvent(StreamId stream) override {
    const EventHandle event = sim_.RecordEvent(stream);
    if (on_record_event) on_record_event(stream, event);
    return event;
  }
  absl::Status StreamWaitEvent(StreamId waiter, EventHandle event) override {
    absl::Status s = sim_.StreamWaitEvent(waiter, event);
    if (s.ok() && on_stream_wait) on_stream_wait(waiter, event);
    return s;
  }
  bool EventCompleted(EventHandle event) override { return sim_.EventCompleted(event); }
  void ReleaseEvent(EventHandle event) override { sim_.ReleaseEvent(event); }
  void Synchronize() override {
    std::unique_lock<std::mutex> lock;
    if (synchronize_mu != nullptr) lock = std::unique_lock(*synchronize_mu);
    sim_.Synchronize();
    ++synchronizations;
    if (on_synchronize) on_synchronize();
  }
  BackendCounters counters() const override { return sim_.counters(); }

 private:
  SimBackend& sim_;
};

}  // namespace gpumem::testing
