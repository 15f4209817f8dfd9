// FaultInjectingBackend: a Backend that passes every call to another one (SimBackend in
// tests, a CUDA backend on a GPU) and makes some of them fail at random, as a device can:
// page creates, maps (some pages mapped, then undone), unmaps, address reservations,
// segment allocations and stream waits return an error, and event queries answer "not
// yet". Seeded, so a failing run repeats. With every rate 0 it only passes calls on.
// The allocator's promise under faults (docs/reliability.md): every failure comes back as
// an OOM or an error, never an abort, an overlap, a page it lost track of, or an
// allocator that stays unusable once the faults stop.
#pragma once

#include <cstdint>
#include <mutex>
#include <random>

#include "allocator/backend.h"

namespace gpumem {

// The chance that one call of each kind fails.
struct FaultRates {
  double create = 0;       // CreatePhysical
  double map = 0;          // Map, MapPages
  double unmap = 0;        // Unmap
  double event_query = 0;  // EventCompleted answers false whatever the event's state
  double reserve = 0;      // ReserveAddressRange
  double segment = 0;      // AllocateSegment
  double stream_wait = 0;  // StreamWaitEvent
};

// Faults injected so far, by kind.
struct FaultCounts {
  std::uint64_t create = 0;
  std::uint64_t map = 0;
  std::uint64_t unmap = 0;
  std::uint64_t event_query = 0;
  std::uint64_t reserve = 0;
  std::uint64_t segment = 0;
  std::uint64_t stream_wait = 0;
  std::uint64_t total() const {
    return create + map + unmap + event_query + reserve + segment + stream_wait;
  }
};

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(Backend& inner, std::uint64_t seed, FaultRates rates = {});

  // All zero: faults off.
  void set_rates(const FaultRates& rates);
  FaultCounts injected() const;

  std::size_t granularity() const override { return inner_.granularity(); }
  std::uint64_t capacity() const override { return inner_.capacity(); }
  bool supports_vmm() const override { return inner_.supports_vmm(); }
  std::uint64_t DeviceFreeBytes() const override { return inner_.DeviceFreeBytes(); }

  absl::StatusOr<DevicePtr> ReserveAddressRange(std::size_t bytes) override;
  void ReleaseAddressRange(DevicePtr base, std::size_t bytes) override {
    inner_.ReleaseAddressRange(base, bytes);
  }
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::size_t bytes) override;
  void ReleasePhysical(PhysicalHandle handle) override { inner_.ReleasePhysical(handle); }
  absl::Status Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                   std::size_t offset) override;
  absl::Status MapPages(DevicePtr va, std::size_t page_bytes, const PhysicalHandle* handles,
                        std::size_t n) override;
  absl::Status Unmap(DevicePtr va, std::size_t bytes) override;
  absl::Status GrantPeerAccess(int peer_device) override {
    return inner_.GrantPeerAccess(peer_device);
  }
  absl::StatusOr<ExportedPages> ExportPages(DevicePtr va, std::size_t bytes) override {
    return inner_.ExportPages(va, bytes);
  }
  absl::StatusOr<DevicePtr> ImportPages(absl::Span<const ExportedPage> pages) override {
    return inner_.ImportPages(pages);
  }
  absl::Status ReleaseImported(DevicePtr base) override { return inner_.ReleaseImported(base); }
  absl::StatusOr<DevicePtr> AllocateSegment(std::size_t bytes) override;
  void FreeSegment(DevicePtr ptr, std::size_t bytes) override { inner_.FreeSegment(ptr, bytes); }
  EventHandle RecordEvent(StreamId stream) override { return inner_.RecordEvent(stream); }
  absl::Status StreamWaitEvent(StreamId waiter, EventHandle event) override;
  bool EventCompleted(EventHandle event) override;
  void ReleaseEvent(EventHandle event) override { inner_.ReleaseEvent(event); }
  void Synchronize() override { inner_.Synchronize(); }
  BackendCounters counters() const override { return inner_.counters(); }

 private:
  // Whether this call of the kind with `rate` fails; counts it in `count` if so.
  bool Fail(double FaultRates::*rate, std::uint64_t FaultCounts::*count);
  // A number in [0, n), from the seeded generator.
  std::size_t Below(std::size_t n);

  Backend& inner_;
  mutable std::mutex mu_;  // the allocator may call from several threads
  std::mt19937_64 rng_;
  FaultRates rates_;
  FaultCounts injected_;
};

}  // namespace gpumem
