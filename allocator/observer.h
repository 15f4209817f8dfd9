// How an allocator tells the profiler what it does, without depending on it: the
// recorder implements AllocatorObserver and the C ABI connects the two. Calls come from
// the allocating thread, inside the allocator's hot path: keep them cheap.
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/backend.h"

namespace gpumem {

enum class AllocatorEventKind : std::uint8_t {
  kAlloc,         // a block handed out
  kFree,          // a block returned by its owner
  kMap,           // physical pages mapped into a range (or a segment obtained)
  kUnmap,         // pages unmapped (or a segment returned)
  kOom,           // a request failed after trimming and defragmenting
};

struct AllocatorEvent {
  AllocatorEventKind kind;
  int device;
  DevicePtr ptr;
  std::size_t bytes;
  StreamId stream;
};

class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;
  virtual void OnEvent(const AllocatorEvent& event) = 0;
  // Whether it is told of kAlloc and kFree. gpumem reports those in order under its lock,
  // so an observer that wants them turns off the per-thread caches (docs/allocator.md);
  // one that follows pages and OOMs only (false) leaves them on and never sees a block.
  virtual bool wants_block_events() const { return true; }
  // Asked at each allocation, under the allocator's lock: false (a paused trace) and
  // neither that allocation nor, whenever it comes, its free is reported. A trace paused
  // and resumed so holds whole blocks only, and a paused one records nothing per block.
  virtual bool RecordsAllocations() const { return true; }
};

}  // namespace gpumem
