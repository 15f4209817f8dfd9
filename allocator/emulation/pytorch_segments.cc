// Getting device memory for PyTorch's allocator and giving it back: cudaMalloc'd
// segments (alloc_block, release_block) and, on the way to an OOM, releasing cached
// memory (release_available_cached_blocks, release_cached_blocks).
#include <algorithm>
#include <limits>
#include <vector>

#include "allocator/emulation/pytorch_allocator.h"
#include "allocator/emulation/pytorch_sizes.h"

namespace gpumem::emulation {

bool PytorchCachingAllocator::AllocBlock(Request& r) {
  if (options_.expandable_segments) {
    r.block = TryAllocateExpandableBlock(r.stream, r.pool, r.size);
    return r.block != nullptr;
  }
  absl::StatusOr<DevicePtr> ptr = backend_.AllocateSegment(r.alloc_size);
  if (!ptr.ok()) return false;  // cudaErrorMemoryAllocation
  segments_.emplace(*ptr, r.alloc_size);
  AddReserved(r.alloc_size);
  Block* block = arena_.New();
  block->stream = r.stream;
  block->size = r.alloc_size;
  block->pool = r.pool;
  block->ptr = *ptr;
  r.block = block;
  return true;
}

// With max_split_size set: free just enough oversize cached segments of this stream.
bool PytorchCachingAllocator::ReleaseAvailableCachedBlocks(const Request& r) {
  const std::size_t max_split = options_.max_split_size;
  if (max_split == std::numeric_limits<std::size_t>::max()) return false;
  BlockPool& pool = *r.pool;
  Block key;
  key.stream = r.stream;
  key.size = std::max(r.size, max_split);
  auto it = pool.blocks.lower_bound(&key);
  if (it != pool.blocks.end() && (*it)->stream == r.stream) {
    ReleaseBlock(*it);
    return true;
  }
  // No single block is large enough: free oversize blocks, largest first.
  if (it == pool.blocks.begin()) return false;
  std::vector<Block*> victims;
  std::size_t released = 0;
  --it;
  while (released < key.size && (*it)->size >= max_split && (*it)->stream == r.stream) {
    released += (*it)->size;
    victims.push_back(*it);
    if (it == pool.blocks.begin()) break;
    --it;
  }
  for (Block* b : victims) ReleaseBlock(b);
  return released >= key.size;
}

void PytorchCachingAllocator::ReleaseCachedBlocks() {
  ++stats_.trim_count;
  SynchronizeAndFreeEvents();
  ReleaseBlocks(large_blocks_);
  ReleaseBlocks(small_blocks_);
}

void PytorchCachingAllocator::ReleaseBlocks(BlockPool& pool) {
  // Whole free segments go back to the device; free pages of expandable segments are
  // unmapped. Gathered first: releasing changes the pool.
  std::vector<Block*> candidates(pool.blocks.begin(), pool.blocks.end());
  std::vector<Block*> to_unmap;
  for (Block* block : candidates) {
    if (block->expandable) {
      to_unmap.push_back(block);
    } else if (!block->prev && !block->next) {
      ReleaseBlock(block);
    }
  }
  for (Block* block : to_unmap) {
    UnmapBlock(block);
    if (!block->prev && !block->next) ReleaseExpandableSegment(block);
  }
}

void PytorchCachingAllocator::ReleaseBlock(Block* block) {
  backend_.FreeSegment(block->ptr, block->size);
  segments_.erase(block->ptr);
  stats_.reserved_bytes -= block->size;
  block->pool->blocks.erase(block);
  arena_.Delete(block);
}

}  // namespace gpumem::emulation
