// The caching allocator's private pools (CUDA graphs, torch.cuda.MemPool) and stream
// capture. A pool's blocks come only from its own heaps and go back to them; a released
// pool's memory goes once its last block does. During a capture nothing is unmapped,
// waited for or released.
#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "allocator/caching_allocator_impl.h"

namespace gpumem {

// Pool blocks are allocated on the locked path and never recorded in a thread cache:
// their free finds them in live_ and takes the lock too, so they go back to their pool.
absl::StatusOr<DevicePtr> CachingAllocator::AllocateInPool(std::size_t bytes, StreamId stream,
                                                           PoolId pool) {
  if (pool == kDefaultPool) return Allocate(bytes, stream);
  return AllocateLocked(bytes, stream, nullptr, pool);
}

// Pool blocks are all carved from the large pool of the pool's large heap (see KindFor,
// AllocateLocked), so any of them can be put back where it was.
absl::StatusOr<DevicePtr> CachingAllocator::AllocateAt(DevicePtr addr, std::size_t bytes,
                                                       StreamId stream, PoolId pool) {
  std::unique_lock lock(mu_);
  if (pool == kDefaultPool) return absl::InvalidArgumentError("AllocateAt: not a pool");
  auto it = heaps_.find(HeapKey{pool, stream, HeapKind::kLarge});
  Block* b = it == heaps_.end() ? nullptr
                                : it->second->large.CarveAt(addr, RoundUp(bytes, kBlockAlign));
  if (b == nullptr) {
    return absl::NotFoundError("AllocateAt: that memory is not free in the pool");
  }
  pools_[pool].released = false;
  ++pools_[pool].live;
  LiveBlock live{.heap = it->second.get(), .stream = stream, .requested = bytes};
  live.block = b;
  live.bin = b->size;
  live.unseen = !ObservesAllocation();
  Account(addr, live, nullptr);
  if (!live.unseen) Notify(AllocatorEventKind::kAlloc, addr, bytes, stream);
  return addr;
}

// Before the capture starts: a stream wait for an event recorded outside it would break
// it, so every heap's stream waits for its fences now.
void CachingAllocator::BeginCapture() {
  std::lock_guard lock(mu_);
  for (auto& [key, h] : heaps_) WaitForAllFences(*h);
  ++capture_depth_;
}

void CachingAllocator::EndCapture() {
  std::lock_guard lock(mu_);
  if (capture_depth_ == 0 || --capture_depth_ > 0) return;
  for (DeferredFree& d : capture_deferred_) guard_.Defer(d.ptr, d.streams);
  capture_deferred_.clear();
  ReleaseDonePools();
}

void CachingAllocator::ReleasePool(PoolId pool) {
  std::lock_guard lock(mu_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  it->second.released = true;
  if (it->second.live == 0) pool_done_ = true;
  ReleaseDonePools();
}

void CachingAllocator::EmptyPoolCache(PoolId pool) {
  std::lock_guard lock(mu_);
  if (Capturing()) return;
  pages_.BeginSlowPath();
  ReleaseCachedOf([pool](const StreamHeap& h) { return h.pool == pool; });
}

std::vector<DevicePtr> CachingAllocator::PoolLiveBlocks(PoolId pool) const {
  std::lock_guard lock(mu_);
  std::vector<DevicePtr> out;
  auto add = [&](DevicePtr p, const LiveBlock& live) {
    if (!live.pending && live.heap->pool == pool) out.push_back(p);
  };
  live_.ForEach(add);
  for (const std::shared_ptr<ThreadCache>& c : caches_) {
    std::lock_guard cl(c->mu());
    c->ForEachLive(add);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void CachingAllocator::PoolInUse(PoolId pool) { pools_[pool].released = false; }

void CachingAllocator::PoolBlockAdded(PoolId pool) { ++pools_[pool].live; }

void CachingAllocator::PoolBlockReleased(PoolId pool) {
  PoolState& p = pools_[pool];
  if (--p.live == 0 && p.released) pool_done_ = true;
}

void CachingAllocator::ReleaseDonePoolsNow() {
  pool_done_ = false;
  std::vector<PoolId> done;
  for (const auto& [id, p] : pools_) {
    if (p.released && p.live == 0) done.push_back(id);
  }
  if (done.empty()) return;
  pages_.BeginSlowPath();
  for (PoolId id : done) {
    DestroyPoolHeaps(id);
    pools_.erase(id);
  }
  pages_.ReleaseCached();
}

void CachingAllocator::DestroyPoolHeaps(PoolId pool) {
  last_heap_ = {};
  absl::erase_if(heaps_, [&](const auto& entry) {
    const StreamHeap& h = *entry.second;
    if (h.pool != pool) return false;
    slab_bytes_removed_ += h.small.bytes();
    slabs_removed_ += h.small.slab_count();
    return true;
  });
}

bool CachingAllocator::Reclaimable(const StreamHeap& h) const {
  if (h.pool == kDefaultPool) return true;
  auto it = pools_.find(h.pool);
  return it == pools_.end() || it->second.released;
}

}  // namespace gpumem
