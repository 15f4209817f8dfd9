// SimBackend: a device simulated in host memory. It holds no device bytes, only exact
// accounting of what a real device would hold, a capacity cap, and checks that catch
// policy bugs (mapping over a mapping, releasing mapped memory, freeing twice).
// Streams are simulated: events complete at once (kImmediate, for replay) or only when
// the test says the stream has run (kManual), so stream-ordered reuse is testable. A
// stream that waited for an event has run only once the work before that event has.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/backend.h"

namespace gpumem {

struct SimBackendOptions {
  std::uint64_t capacity = std::uint64_t{80} << 30;  // an H100's worth by default
  std::size_t granularity = std::size_t{2} << 20;    // 2 MiB, as on NVIDIA GPUs
  bool vmm = true;
  enum class Events { kImmediate, kManual } events = Events::kImmediate;
  // Added to every address it hands out: simulated devices of one process, like real
  // ones under unified addressing, never share an address.
  std::uint64_t address_offset = 0;
};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(SimBackendOptions options = {});
  ~SimBackend() override;

  std::size_t granularity() const override { return options_.granularity; }
  std::uint64_t capacity() const override { return options_.capacity; }
  bool supports_vmm() const override { return options_.vmm; }
  // The capacity less what this backend and the simulated other users hold.
  std::uint64_t DeviceFreeBytes() const override;

  absl::StatusOr<DevicePtr> ReserveAddressRange(std::size_t bytes) override;
  void ReleaseAddressRange(DevicePtr base, std::size_t bytes) override;
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::size_t bytes) override;
  void ReleasePhysical(PhysicalHandle handle) override;
  absl::Status Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                   std::size_t offset) override;
  absl::Status Unmap(DevicePtr va, std::size_t bytes) override;
  absl::StatusOr<DevicePtr> AllocateSegment(std::size_t bytes) override;
  void FreeSegment(DevicePtr ptr, std::size_t bytes) override;
  EventHandle RecordEvent(StreamId stream) override;
  absl::Status StreamWaitEvent(StreamId waiter, EventHandle event) override;
  bool EventCompleted(EventHandle event) override;
  void ReleaseEvent(EventHandle event) override;
  void Synchronize() override;
  BackendCounters counters() const override;

  // --- simulation controls and checks, for tests
  // kManual events: everything queued on `stream` so far has now run, and with it, on the
  // streams it waited for, the work before the events it waited for (transitively).
  void CompleteStream(StreamId stream);
  // kManual: `stream` has run up to its `events`-th event (counted from 1), and with it
  // the work it waited for before that.
  void CompleteStreamUpTo(StreamId stream, std::uint64_t events);
  // The events recorded on each stream so far.
  std::vector<std::pair<StreamId, std::uint64_t>> RecordedEvents() const;
  // True if every byte of [ptr, ptr+bytes) is usable memory: inside a live segment or
  // backed by mappings.
  bool IsAccessible(DevicePtr ptr, std::size_t bytes) const;
  // The physical memory behind [ptr, ptr+bytes): pieces of physical allocations (a page
  // may be mapped at two addresses), or of a segment (handle 0, offset = address).
  struct Piece {
    PhysicalHandle handle;
    std::size_t offset;
    std::size_t bytes;
  };
  std::vector<Piece> Backing(DevicePtr ptr, std::size_t bytes) const;
  std::size_t live_events() const;
  void set_capacity(std::uint64_t capacity);
  // Device memory held by the rest of the process (cuBLAS, NCCL, ...): it counts against
  // the capacity, so raising it shrinks the free memory and makes creation fail sooner.
  void set_other_users_bytes(std::uint64_t bytes);

 private:
  struct Mapping {
    std::size_t bytes;
    PhysicalHandle handle;
    std::size_t offset;
  };
  struct Event {
    StreamId stream;
    std::uint64_t sequence;
  };
  // A wait queued on a stream after `after` of its events: once that stream has run past
  // it, `stream` has run up to event `sequence`.
  struct Wait {
    std::uint64_t after;
    StreamId stream;
    std::uint64_t sequence;
  };

  [[noreturn]] void Misuse(const std::string& what) const;
  absl::Status Charge(std::size_t bytes, const char* what);  // capacity check + count
  bool InReservedRange(DevicePtr va, std::size_t bytes) const;
  std::optional<DevicePtr> FirstGap(std::size_t bytes) const;
  // Marks `stream` run up to its event `sequence` and, with `waits_too`, past the waits
  // queued after it as well; then the streams those waits name (mu_ held).
  void CompleteLocked(StreamId stream, std::uint64_t sequence, bool waits_too);

  SimBackendOptions options_;
  mutable std::mutex mu_;
  BackendCounters counters_;
  std::uint64_t other_users_bytes_ = 0;
  DevicePtr next_va_;
  DevicePtr next_segment_;
  std::map<DevicePtr, std::size_t> ranges_;      // reserved VA: base -> bytes
  std::map<DevicePtr, Mapping> mappings_;        // va -> mapping
  std::map<DevicePtr, std::size_t> segments_;    // base -> bytes
  std::unordered_map<PhysicalHandle, std::size_t> physical_;  // handle -> bytes
  std::unordered_map<PhysicalHandle, std::size_t> physical_map_count_;
  PhysicalHandle next_handle_ = 1;
  std::unordered_map<EventHandle, Event> events_;
  EventHandle next_event_ = 1;
  std::unordered_map<StreamId, std::uint64_t> recorded_;   // events recorded per stream
  std::unordered_map<StreamId, std::uint64_t> completed_;  // events completed per stream
  std::unordered_map<StreamId, std::vector<Wait>> waits_;  // not yet run, per stream
};

}  // namespace gpumem
