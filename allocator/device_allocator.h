// What every allocation policy offers its callers: the C ABI in hooks/, the trace replay
// in tools/, and tests. gpumem's CachingAllocator implements it, and so do the emulations
// of PyTorch's native policies that replay compares it with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "allocator/backend.h"

namespace gpumem {

struct AllocatorStats {
  std::uint64_t allocated_bytes = 0;       // bytes of live blocks, as requested
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;        // device memory held (the backend's physical bytes)
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t active_blocks = 0;
  std::uint64_t alloc_count = 0;
  std::uint64_t free_count = 0;
  std::uint64_t oom_count = 0;
  std::uint64_t stitch_count = 0;          // requests served by stitching pages (defrag)
  std::uint64_t trim_count = 0;            // times cached memory was released under pressure
  std::uint64_t largest_free_bytes = 0;    // the largest request that could be served now
                                           // without new device memory
  std::uint64_t thread_cached_bytes = 0;   // free blocks held in per-thread caches (gpumem)
  // 1 - allocated/reserved: the share of held memory that live blocks do not use.
  double fragmentation() const {
    return reserved_bytes == 0 ? 0.0
                               : 1.0 - static_cast<double>(allocated_bytes) / reserved_bytes;
  }
};

// Why an allocation failed, in the figures a user needs to tell a leak, fragmentation
// and a genuine peak apart.
struct OomReport {
  std::uint64_t requested_bytes = 0;
  std::uint64_t allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t largest_free_bytes = 0;
  std::uint64_t capacity_bytes = 0;
  std::string ToString() const;
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // Name as used on the command line (gpumem, pytorch, pytorch-expandable).
  virtual std::string_view name() const = 0;

  // A block of at least `bytes` usable on `stream`, or ResourceExhausted with an
  // OomReport (see last_oom) once cached memory has been released and retried. Never
  // aborts. Zero bytes returns a unique non-null pointer-free block: callers may pass 0.
  virtual absl::StatusOr<DevicePtr> Allocate(std::size_t bytes, StreamId stream) = 0;
  // Returns a block. It is reusable by its own stream at once and by other streams once
  // work queued on every stream that used it (RecordStream) has completed.
  virtual void Free(DevicePtr ptr) = 0;
  // The block is also used on `stream` (PyTorch's record_stream). False when `ptr` is not
  // a live block of this allocator (so a caller with several devices can find its owner).
  virtual bool RecordStream(DevicePtr ptr, StreamId stream) = 0;
  // Release every cached byte not in use (torch.cuda.empty_cache()).
  virtual void EmptyCache() = 0;

  virtual AllocatorStats stats() const = 0;
  virtual void ResetPeaks() = 0;
  virtual OomReport last_oom() const = 0;
};

}  // namespace gpumem
