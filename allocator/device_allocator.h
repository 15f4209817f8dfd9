// What every allocation policy offers its callers: the C ABI in hooks/, the trace replay
// in tools/, and tests. gpumem's CachingAllocator implements it, and so do the emulations
// of PyTorch's native policies that replay compares it with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
  std::uint64_t cross_stream_lends = 0;    // stitches' lends of another stream's idle pages
  std::uint64_t cross_stream_borrows = 0;  // blocks lent whole by another stream's heap
  std::uint64_t trim_count = 0;            // times cached memory was released under pressure
  std::uint64_t largest_free_bytes = 0;    // the largest request that could be served now
                                           // without new device memory
  std::uint64_t private_pools_free_bytes = 0;  // free in private pools (CUDA graphs,
                                               // MemPools): theirs alone
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
  // The reserve kept free for other libraries when that is what refused the request.
  std::uint64_t headroom_bytes = 0;
  // Free in other private pools (CUDA graphs, torch.cuda.MemPool still alive): reserved,
  // unallocated, and no use to the failed request.
  std::uint64_t other_pools_free_bytes = 0;
  std::string ToString() const;
  std::string HeadroomNote() const;  // "" unless the headroom refused the request
  std::string PoolsNote() const;     // "" unless other private pools hold free memory
};

// A private pool (CUDA graphs, torch.cuda.MemPool); 0 is the default pool.
using PoolId = std::uint64_t;
inline constexpr PoolId kDefaultPool = 0;

// PyTorch's Stat: current and peak, and cumulative figures since ResetAccumulated().
struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;
};

// PyTorch's DeviceStats. Index 0: every block; 1: small blocks (size-class slabs);
// 2: large blocks. Bytes of blocks are as requested (PoolLayout has carved sizes).
struct DetailedStats {
  enum Kind { kAll = 0, kSmall = 1, kLarge = 2 };
  Stat allocation[3];       // live blocks
  Stat segment[3];          // ranges holding pages or segments (all, large); slabs (small)
  Stat active[3];           // live blocks and blocks whose free waits for other streams
  Stat allocated_bytes[3];  // bytes of live blocks
  Stat reserved_bytes[3];   // device memory held: small = slab bytes, large = the rest
  Stat active_bytes[3];
  Stat requested_bytes[3];
  std::int64_t num_alloc_retries = 0;  // allocations that released cache or stitched
  std::int64_t num_ooms = 0;
  std::int64_t num_device_alloc = 0;   // physical pages created / segments obtained
  std::int64_t num_device_free = 0;
};

// Calls f(a.x, b.x) for each of the Stat arrays x of two structs of DetailedStats' shape
// (DetailedStats itself, or the C ABI's gpumem_detailed_stats_t), then for the counters.
template <typename A, typename B, typename F>
void ForEachStatField(A& a, B& b, F&& f) {
  f(a.allocation, b.allocation);
  f(a.segment, b.segment);
  f(a.active, b.active);
  f(a.allocated_bytes, b.allocated_bytes);
  f(a.reserved_bytes, b.reserved_bytes);
  f(a.active_bytes, b.active_bytes);
  f(a.requested_bytes, b.requested_bytes);
  f(a.num_alloc_retries, b.num_alloc_retries);
  f(a.num_ooms, b.num_ooms);
  f(a.num_device_alloc, b.num_device_alloc);
  f(a.num_device_free, b.num_device_free);
}

// The memory layout for snapshots: segments in address order with their blocks.
struct LayoutBlock {
  enum State { kFree = 0, kAllocated = 1, kPendingFree = 2 };
  DevicePtr address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // 0 unless allocated
  State state = kFree;
};
struct LayoutSegment {
  DevicePtr address = 0;
  std::size_t total_size = 0;
  std::size_t allocated_size = 0;  // allocated blocks, as carved
  std::size_t requested_size = 0;  // allocated blocks, as requested
  StreamId stream = kDefaultStream;
  PoolId pool = kDefaultPool;
  bool is_small = false;           // a slab: its blocks are size-class slots
  std::vector<LayoutBlock> blocks;  // in address order, covering the segment exactly
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

  // Gives back idle memory that something outside the allocator needs (a library's
  // driver allocation failed). Unlike EmptyCache, it may be called from inside the
  // allocator's own driver calls (a tracer's callback on them): there it does nothing,
  // since the allocator releases and retries on its own.
  virtual void ReleaseIdle() { EmptyCache(); }
  // Something outside the allocator just took device memory (an NCCL communicator's
  // buffers, a cuBLAS workspace): where that left the driver less free than the
  // allocator's headroom, idle memory goes back so that the rest of that burst succeeds.
  virtual void KeepHeadroom() {}

  virtual AllocatorStats stats() const = 0;
  virtual void ResetPeaks() = 0;
  virtual OomReport last_oom() const = 0;

  // --- Optional: the rest of PyTorch's allocator interface. Policies without it keep
  // these defaults (Unimplemented, nothing, empty).

  // Whether `ptr` is a live block of this allocator.
  virtual bool Owns(DevicePtr /*ptr*/) const { return false; }
  // The bytes asked for the live block at `ptr`; 0 if it is none.
  virtual std::size_t BlockBytes(DevicePtr /*ptr*/) const { return 0; }
  // Free(ptr) if `ptr` is a live block here; whether it was.
  virtual bool FreeIfOwned(DevicePtr ptr) {
    if (!Owns(ptr)) return false;
    Free(ptr);
    return true;
  }

  // Allocate() from private pool `pool` (0: Allocate). A pool's blocks come only from its
  // own memory, which no other pool gets, and go back to it when freed.
  virtual absl::StatusOr<DevicePtr> AllocateInPool(std::size_t bytes, StreamId stream,
                                                   PoolId pool) {
    if (pool == kDefaultPool) return Allocate(bytes, stream);
    return absl::UnimplementedError("this policy has no private pools");
  }
  // A private pool's block at exactly `addr`, which must be free memory of that pool's
  // heap for `stream` (how a checkpointed pool state is restored); NotFound otherwise.
  virtual absl::StatusOr<DevicePtr> AllocateAt(DevicePtr addr, std::size_t bytes,
                                               StreamId stream, PoolId pool) {
    (void)addr, (void)bytes, (void)stream, (void)pool;
    return absl::UnimplementedError("this policy cannot place a block");
  }
  // A stream capture begins / ends (they nest). In between, no call may break a capture:
  // no event query, synchronize, unmap or release.
  virtual void BeginCapture() {}
  virtual void EndCapture() {}
  // The pool's owner is gone: its memory is released once none of its blocks is live.
  virtual void ReleasePool(PoolId /*pool*/) {}
  // Releases the pool's memory that no live block uses.
  virtual void EmptyPoolCache(PoolId /*pool*/) {}
  // The addresses of the pool's live blocks.
  virtual std::vector<DevicePtr> PoolLiveBlocks(PoolId /*pool*/) const { return {}; }

  // Zero except where a policy tracks them.
  virtual DetailedStats detailed_stats() const { return {}; }
  // Sets the cumulative figures of detailed_stats() to zero.
  virtual void ResetAccumulated() {}
  // Segments in address order; empty where a policy does not track them.
  virtual std::vector<LayoutSegment> Layout() const { return {}; }
};

}  // namespace gpumem
