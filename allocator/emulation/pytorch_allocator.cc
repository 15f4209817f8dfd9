#include "allocator/emulation/pytorch_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "allocator/emulation/pytorch_sizes.h"

namespace gpumem::emulation {

PytorchCachingAllocator::PytorchCachingAllocator(Backend& backend, PytorchOptions options)
    : backend_(backend), options_(options) {}

PytorchCachingAllocator::~PytorchCachingAllocator() {
  // Give every byte back, live blocks included: the allocator owns its segments.
  for (const PendingEvent& e : events_) backend_.ReleaseEvent(e.event);
  for (const auto& [ptr, bytes] : segments_) backend_.FreeSegment(ptr, bytes);
  expandable_segments_.clear();  // unmaps pages and releases address space
}

absl::StatusOr<DevicePtr> PytorchCachingAllocator::Allocate(std::size_t bytes,
                                                            StreamId stream) {
  std::lock_guard lock(mu_);
  ProcessEvents();
  // Past any device, and past where rounding would overflow: PyTorch's cudaMalloc fails,
  // it releases its cache and retries, and raises.
  if (bytes > kMaxRequest) {
    ReleaseCachedBlocks();
    return Oom(bytes);
  }
  const std::size_t size = RoundSize(bytes);
  BlockPool& pool = size <= kSmallSize ? small_blocks_ : large_blocks_;
  Request r{size, stream, &pool, AllocationSize(size)};
  // As malloc(): cached block, else new memory, else release cached memory and retry.
  bool found = GetFreeBlock(r);
  if (!found) {
    found = AllocBlock(r) || (ReleaseAvailableCachedBlocks(r) && AllocBlock(r));
    if (!found) {
      ReleaseCachedBlocks();
      found = AllocBlock(r);
    }
  }
  if (!found) return Oom(bytes);
  Block* block = AllocFoundBlock(r, bytes, ShouldSplit(r.block, size));
  return block->ptr;
}

absl::Status PytorchCachingAllocator::Oom(std::size_t bytes) {
  ++stats_.oom_count;
  last_oom_ = OomReport{bytes, stats_.allocated_bytes, stats_.reserved_bytes, 0,
                        backend_.capacity()};
  for (const BlockPool* p : {&large_blocks_, &small_blocks_}) {
    for (const Block* b : p->blocks) {
      last_oom_.largest_free_bytes = std::max<std::uint64_t>(last_oom_.largest_free_bytes, b->size);
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("out of memory: requested ", bytes, " bytes with ", stats_.reserved_bytes,
                   " reserved of ", backend_.capacity()));
}

bool PytorchCachingAllocator::GetFreeBlock(Request& r) {
  BlockPool& pool = *r.pool;
  Block key;
  key.stream = r.stream;
  key.size = r.size;
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != r.stream) return false;
  if ((*it)->expandable) {
    // Best fit counts the unmapped space right after a block as part of it: prefer the
    // block that can grow least.
    auto expandable_size = [](const Block* b) {
      return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
    };
    auto next = std::next(it);
    while ((*it)->expandable && next != pool.blocks.end() && (*next)->stream == r.stream &&
           expandable_size(*next) < expandable_size(*it)) {
      it = next++;
    }
  }
  const std::size_t max_split = options_.max_split_size;
  // No oversize block for a small request; an oversize request may round up by < 20 MiB.
  if (r.size < max_split && (*it)->size >= max_split) return false;
  if (r.size >= max_split && (*it)->size >= r.size + kLargeBuffer) return false;
  r.block = *it;
  pool.blocks.erase(it);
  return true;
}

bool PytorchCachingAllocator::ShouldSplit(const Block* block, std::size_t size) const {
  const std::size_t remaining = block->size - size;
  if (block->pool->is_small || options_.expandable_segments) return remaining >= kMinBlockSize;
  return size < options_.max_split_size && remaining > kSmallSize;
}

Block* PytorchCachingAllocator::AllocFoundBlock(Request& r, std::size_t orig_size,
                                                bool split_remainder) {
  Block* block = r.block;
  if (split_remainder) {
    // The front part is handed out; the rest stays free in the pool.
    Block* remaining = block;
    block = arena_.New();
    block->stream = r.stream;
    block->size = r.size;
    block->pool = r.pool;
    block->ptr = remaining->ptr;
    block->expandable = remaining->expandable;
    block->prev = remaining->prev;
    if (block->prev) block->prev->next = block;
    block->next = remaining;
    remaining->prev = block;
    remaining->ptr += r.size;
    remaining->size -= r.size;
    r.pool->blocks.insert(remaining);
  }
  block->allocated = true;
  block->requested_size = orig_size;
  active_blocks_.emplace(block->ptr, block);
  stats_.allocated_bytes += orig_size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.active_blocks;
  ++stats_.alloc_count;
  return block;
}

void PytorchCachingAllocator::Free(DevicePtr ptr) {
  std::lock_guard lock(mu_);
  auto it = active_blocks_.find(ptr);
  if (it == active_blocks_.end()) {
    std::fprintf(stderr, "PytorchCachingAllocator: Free(%#llx) of an unknown block\n",
                 static_cast<unsigned long long>(ptr));
    std::abort();
  }
  Block* block = it->second;
  active_blocks_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes -= block->requested_size;
  --stats_.active_blocks;
  ++stats_.free_count;
  if (!block->stream_uses.empty()) {
    InsertEvents(block);
  } else {
    FreeBlock(block);
  }
}

void PytorchCachingAllocator::FreeBlock(Block* block) {
  BlockPool& pool = *block->pool;
  TryMergeBlocks(block, block->prev, pool);
  TryMergeBlocks(block, block->next, pool);
  pool.blocks.insert(block);
}

std::size_t PytorchCachingAllocator::TryMergeBlocks(Block* dst, Block* src, BlockPool& pool) {
  if (!src || src->allocated || src->event_count > 0 || !src->stream_uses.empty() ||
      dst->mapped != src->mapped) {
    return 0;
  }
  if (dst->prev == src) {  // [src dst]
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {  // [dst src]
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const std::size_t subsumed = src->size;
  dst->size += subsumed;
  if (src->mapped) {
    pool.blocks.erase(src);
  } else {
    pool.unmapped.erase(src);
  }
  arena_.Delete(src);
  return subsumed;
}

bool PytorchCachingAllocator::RecordStream(DevicePtr ptr, StreamId stream) {
  std::lock_guard lock(mu_);
  auto it = active_blocks_.find(ptr);
  if (it == active_blocks_.end()) return false;
  Block* block = it->second;
  // The allocation stream is ordered with itself already.
  if (stream == block->stream) return true;
  if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) ==
      block->stream_uses.end()) {
    block->stream_uses.push_back(stream);
  }
  return true;
}

void PytorchCachingAllocator::InsertEvents(Block* block) {
  for (StreamId stream : block->stream_uses) {
    events_.push_back({backend_.RecordEvent(stream), block});
    ++block->event_count;
  }
  block->stream_uses.clear();
}

void PytorchCachingAllocator::ProcessEvents() {
  if (events_.empty()) return;
  std::vector<PendingEvent> waiting;
  for (const PendingEvent& e : events_) {
    if (!backend_.EventCompleted(e.event)) {
      waiting.push_back(e);
      continue;
    }
    backend_.ReleaseEvent(e.event);
    if (--e.block->event_count == 0) FreeBlock(e.block);
  }
  events_.swap(waiting);
}

void PytorchCachingAllocator::SynchronizeAndFreeEvents() {
  backend_.Synchronize();
  ProcessEvents();
}

void PytorchCachingAllocator::AddReserved(std::size_t bytes) {
  stats_.reserved_bytes += bytes;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

void PytorchCachingAllocator::EmptyCache() {
  std::lock_guard lock(mu_);
  ReleaseCachedBlocks();
}

AllocatorStats PytorchCachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  AllocatorStats s = stats_;
  s.largest_free_bytes = 0;
  for (const BlockPool* p : {&large_blocks_, &small_blocks_}) {
    for (const Block* b : p->blocks) {
      s.largest_free_bytes = std::max<std::uint64_t>(s.largest_free_bytes, b->size);
    }
  }
  return s;
}

void PytorchCachingAllocator::ResetPeaks() {
  std::lock_guard lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

OomReport PytorchCachingAllocator::last_oom() const {
  std::lock_guard lock(mu_);
  return last_oom_;
}

std::unique_ptr<DeviceAllocator> MakePytorchAllocator(Backend& backend) {
  return std::make_unique<PytorchCachingAllocator>(backend, PytorchOptions{});
}

std::unique_ptr<DeviceAllocator> MakePytorchExpandableAllocator(Backend& backend) {
  PytorchOptions options;
  options.expandable_segments = true;
  return std::make_unique<PytorchCachingAllocator>(backend, options);
}

}  // namespace gpumem::emulation
