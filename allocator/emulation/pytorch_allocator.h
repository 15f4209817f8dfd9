// An emulation of PyTorch's native CUDACachingAllocator (DeviceCachingAllocator in
// c10/cuda/CUDACachingAllocator.cpp), on the Backend interface, so replay can compare
// gpumem with what PyTorch itself would reserve for the same trace. It follows
// PyTorch's rules, not its code layout: sizes (pytorch_sizes.h), best fit with
// splitting (this file's .cc), plain segments (pytorch_segments.cc) or expandable
// segments (pytorch_expandable.cc). CUDA graph pools, IPC, garbage collection and
// per-process memory fractions are left out: replayed traces do not use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/device_allocator.h"
#include "allocator/emulation/block.h"
#include "allocator/emulation/expandable_segment.h"

namespace gpumem::emulation {

struct PytorchOptions {
  bool expandable_segments = false;                                // expandable_segments:True
  std::size_t max_split_size = std::numeric_limits<std::size_t>::max();  // max_split_size_mb
};

class PytorchCachingAllocator final : public DeviceAllocator {
 public:
  PytorchCachingAllocator(Backend& backend, PytorchOptions options);
  ~PytorchCachingAllocator() override;

  std::string_view name() const override {
    return options_.expandable_segments ? "pytorch-expandable" : "pytorch";
  }
  absl::StatusOr<DevicePtr> Allocate(std::size_t bytes, StreamId stream) override;
  void Free(DevicePtr ptr) override;
  bool RecordStream(DevicePtr ptr, StreamId stream) override;
  void EmptyCache() override;
  AllocatorStats stats() const override;
  void ResetPeaks() override;
  OomReport last_oom() const override;

 private:
  // AllocParams: one request on its way through the allocator.
  struct Request {
    std::size_t size;        // rounded
    StreamId stream;
    BlockPool* pool;
    std::size_t alloc_size;  // what a new plain segment would be
    Block* block = nullptr;
  };

  // --- pytorch_allocator.cc: best fit, split, merge, stream events
  absl::Status Oom(std::size_t bytes);  // records last_oom_
  bool GetFreeBlock(Request& r);
  bool ShouldSplit(const Block* block, std::size_t size) const;
  Block* AllocFoundBlock(Request& r, std::size_t orig_size, bool split_remainder);
  void FreeBlock(Block* block);
  std::size_t TryMergeBlocks(Block* dst, Block* src, BlockPool& pool);
  void InsertEvents(Block* block);
  void ProcessEvents();
  void SynchronizeAndFreeEvents();
  void AddReserved(std::size_t bytes);

  // --- pytorch_segments.cc: getting and returning device memory
  bool AllocBlock(Request& r);
  bool ReleaseAvailableCachedBlocks(const Request& r);
  void ReleaseCachedBlocks();
  void ReleaseBlocks(BlockPool& pool);
  void ReleaseBlock(Block* block);

  // --- pytorch_expandable.cc: expandable segments
  Block* TryAllocateExpandableBlock(StreamId stream, BlockPool* pool, std::size_t size);
  Block* FindExpandableBlock(StreamId stream, BlockPool* pool, std::size_t size);
  bool MapBlock(Block* to_map, std::size_t size);
  void UnmapBlock(Block* block);
  void ReleaseExpandableSegment(Block* block);

  Backend& backend_;
  const PytorchOptions options_;
  mutable std::mutex mu_;
  BlockArena arena_;
  BlockPool large_blocks_{false};
  BlockPool small_blocks_{true};
  absl::flat_hash_map<DevicePtr, Block*> active_blocks_;
  absl::flat_hash_map<DevicePtr, std::size_t> segments_;  // plain segments: base -> bytes
  std::vector<std::unique_ptr<ExpandableSegment>> expandable_segments_;
  struct PendingEvent {
    EventHandle event;
    Block* block;
  };
  std::vector<PendingEvent> events_;  // cross-stream frees waiting for their streams
  AllocatorStats stats_;
  OomReport last_oom_;
};

// The two policies replay compares gpumem with, for allocator/policies.cc.
std::unique_ptr<DeviceAllocator> MakePytorchAllocator(Backend& backend);
std::unique_ptr<DeviceAllocator> MakePytorchExpandableAllocator(Backend& backend);

}  // namespace gpumem::emulation
