// expandable_segments:True - one growing virtual range per stream and pool, pages mapped
// at the lowest free address that fits (find_expandable_block, map_block) and unmapped
// only when cached memory is released (unmap_block).
#include <algorithm>

#include "allocator/emulation/pytorch_allocator.h"
#include "allocator/emulation/pytorch_sizes.h"

namespace gpumem::emulation {
namespace {

// PyTorch reserves 1 1/8 of the device's memory per segment. A simulated device may be
// "unlimited"; a TiB of device memory is more than any replayed trace uses.
constexpr std::uint64_t kMaxDeviceBytes = std::uint64_t{1} << 40;

bool Allocatable(const Block* b) {
  return b && !b->allocated && b->event_count == 0 && b->stream_uses.empty();
}

}  // namespace

Block* PytorchCachingAllocator::TryAllocateExpandableBlock(StreamId stream, BlockPool* pool,
                                                          std::size_t size) {
  Block* candidate = FindExpandableBlock(stream, pool, size);
  if (candidate == nullptr) return nullptr;
  // candidate is a run of free / unmapped blocks with room for `size`:
  // unmapped -> null, unmapped -> free -> ..., free -> unmapped -> ...
  if (!candidate->mapped && !MapBlock(candidate, std::min(candidate->size, size))) {
    return nullptr;
  }
  while (candidate->size < size) {
    // free -> unmapped: map part of the unmapped block; it merges with the free one.
    const std::size_t remaining = size - candidate->size;
    Block* next = candidate->next;
    if (next == nullptr || next->mapped) return nullptr;  // the run ended: cannot happen
    if (!MapBlock(next, std::min(remaining, next->size))) return nullptr;
    candidate = next;
  }
  pool->blocks.erase(candidate);
  return candidate;
}

Block* PytorchCachingAllocator::FindExpandableBlock(StreamId stream, BlockPool* pool,
                                                   std::size_t size) {
  auto has_room = [size](const Block* b) {
    std::size_t bytes = 0;
    while (bytes < size && Allocatable(b)) {
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size;
  };
  Block key;
  key.stream = stream;
  key.ptr = 0;
  for (auto it = pool->unmapped.lower_bound(&key);
       it != pool->unmapped.end() && (*it)->stream == stream; ++it) {
    // The lowest unmapped address, together with a free block just before it.
    Block* c = *it;
    if (Allocatable(c->prev)) c = c->prev;
    if (has_room(c)) return c;
  }
  const std::size_t page = pool->is_small ? kSmallBuffer : kLargeBuffer;
  const std::uint64_t device = std::min<std::uint64_t>(backend_.capacity(), kMaxDeviceBytes);
  if (size > device + device / 8) return nullptr;  // not even a whole new segment holds it
  absl::StatusOr<std::unique_ptr<ExpandableSegment>> segment =
      ExpandableSegment::Create(backend_, stream, device + device / 8, page);
  if (!segment.ok()) return nullptr;
  ExpandableSegment* es = segment->get();
  expandable_segments_.push_back(*std::move(segment));
  Block* candidate = arena_.New();
  candidate->stream = stream;
  candidate->size = es->size();
  candidate->pool = pool;
  candidate->ptr = es->ptr();
  candidate->mapped = false;
  candidate->expandable = es;
  pool->unmapped.insert(candidate);
  return candidate;
}

bool PytorchCachingAllocator::MapBlock(Block* to_map, std::size_t size) {
  const SegmentRange mapped = to_map->expandable->Map({to_map->ptr, size});
  if (mapped.size == 0) return false;
  BlockPool& pool = *to_map->pool;
  pool.unmapped.erase(to_map);
  to_map->mapped = true;
  if (mapped.size < to_map->size) {
    // to_map -> remaining (still unmapped) -> to_map->next
    Block* remaining = arena_.New();
    remaining->stream = to_map->stream;
    remaining->size = to_map->size - mapped.size;
    remaining->pool = &pool;
    remaining->ptr = to_map->ptr + mapped.size;
    remaining->mapped = false;
    remaining->expandable = to_map->expandable;
    remaining->Splice(to_map, to_map->next);
    pool.unmapped.insert(remaining);
    to_map->size = mapped.size;
  }
  TryMergeBlocks(to_map, to_map->prev, pool);
  TryMergeBlocks(to_map, to_map->next, pool);
  pool.blocks.insert(to_map);
  AddReserved(mapped.size);
  return true;
}

void PytorchCachingAllocator::UnmapBlock(Block* block) {
  const SegmentRange unmapped = block->expandable->Unmap({block->ptr, block->size});
  if (unmapped.size == 0) return;
  BlockPool& pool = *block->pool;
  pool.blocks.erase(block);
  const std::size_t before = unmapped.ptr - block->ptr;
  if (before > 0) {
    // prev -> before_free -> block
    Block* before_free = arena_.New();
    before_free->stream = block->stream;
    before_free->size = before;
    before_free->pool = &pool;
    before_free->ptr = block->ptr;
    before_free->expandable = block->expandable;
    before_free->Splice(block->prev, block);
    pool.blocks.insert(before_free);
  }
  const std::size_t after = block->size - (before + unmapped.size);
  if (after > 0) {
    // block -> after_free -> next
    Block* after_free = arena_.New();
    after_free->stream = block->stream;
    after_free->size = after;
    after_free->pool = &pool;
    after_free->ptr = unmapped.ptr + unmapped.size;
    after_free->expandable = block->expandable;
    after_free->Splice(block, block->next);
    pool.blocks.insert(after_free);
  }
  block->ptr = unmapped.ptr;
  block->size = unmapped.size;
  block->mapped = false;
  TryMergeBlocks(block, block->prev, pool);
  TryMergeBlocks(block, block->next, pool);
  pool.unmapped.insert(block);
  stats_.reserved_bytes -= unmapped.size;
}

void PytorchCachingAllocator::ReleaseExpandableSegment(Block* block) {
  // The block spans the whole segment and nothing is mapped: drop the segment.
  block->pool->unmapped.erase(block);
  auto it = std::find_if(expandable_segments_.begin(), expandable_segments_.end(),
                         [&](const auto& s) { return s.get() == block->expandable; });
  if (it != expandable_segments_.end()) expandable_segments_.erase(it);
  arena_.Delete(block);
}

}  // namespace gpumem::emulation
