// The caching allocator's per-thread caches (thread_cache.h): the cached alloc and free,
// the records of blocks handed out through a cache, and draining caches back to the pools.
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "allocator/caching_allocator_impl.h"

namespace gpumem {

absl::StatusOr<DevicePtr> CachingAllocator::AllocateCached(std::size_t bytes,
                                                           StreamId stream) {
  ThreadCache* c = MyCache(/*create=*/true);
  if (c != nullptr) {
    DevicePtr ptr;
    const bool small = bytes <= options_.small_limit;
    const int size_class = small ? SizeClasses::ClassOf(bytes) : -1;
    bool hit;
    Rest rest;
    {
      std::lock_guard cl(c->mu());
      hit = c->Pop(stream, size_class, small ? 0 : RoundUp(bytes, kBlockAlign), bytes, &ptr);
      if (hit) {
        c->tally.OnAlloc(bytes, small);
        rest = AddFast(c, bytes);
      }
    }
    if (hit) {
      if (rest.any()) {
        std::lock_guard lock(mu_);
        AddSlow(rest);
      }
      return ptr;
    }
  }
  return AllocateLocked(bytes, stream, c, kDefaultPool);
}

bool CachingAllocator::FreeCached(DevicePtr ptr) {
  ThreadCache* c = ThreadCaches::Find(id_);
  if (c == nullptr) return FreeLocked(ptr);
  LiveBlock live;
  {
    std::lock_guard cl(c->mu());
    LiveBlock* mine = c->FindLive(ptr);
    // A block used on other streams waits for their events: the locked path.
    if (mine != nullptr && !mine->recorded) {
      c->tally.OnFree(mine->requested, mine->size_class >= 0);
      c->credit += mine->requested;  // no shared write: see AddFast
      ++c->count_credit;
      if (c->Free(ptr, mine, &live)) return true;
    }
  }
  if (live.heap == nullptr) return FreeLocked(ptr);
  // Freed, but the cache is full: back to the pool.
  std::lock_guard lock(mu_);
  ReleaseBlock(ptr, live);
  return true;
}

void CachingAllocator::AccountInCache(DevicePtr ptr, const LiveBlock& live, ThreadCache* c) {
  Rest rest;
  {
    std::lock_guard cl(c->mu());
    c->Record(ptr, live);
    c->tally.OnAlloc(live.requested, live.size_class >= 0);
    rest = AddFast(c, live.requested);
  }
  if (rest.any()) AddSlow(rest);
}

bool CachingAllocator::RetireFromCaches(DevicePtr ptr) {
  LiveBlock live;
  if (!TakeFromCaches(ptr, &live)) return false;
  if (Retire(ptr, live)) {
    live_.Insert(ptr, live);  // pending
  } else {
    ReleaseDonePools();
  }
  return true;
}

ThreadCache* CachingAllocator::MyCache(bool create) {
  ThreadCache* c = ThreadCaches::Find(id_);
  if (c != nullptr || !create || ThreadCaches::Exiting()) return c;
  auto cache = std::make_shared<ThreadCache>(static_cast<ThreadCacheOwner*>(this), limits_);
  {
    std::lock_guard reg(RegistryMutex());
    std::lock_guard lock(mu_);
    caches_.push_back(cache);
  }
  c = cache.get();
  ThreadCaches::Add(id_, std::move(cache));
  return c;
}

void CachingAllocator::DetachThreadCache(ThreadCache* c) {
  std::lock_guard lock(mu_);
  std::lock_guard cl(c->mu());
  c->Drain([this](DevicePtr p, const LiveBlock& live) { ReleaseBlock(p, live); });
  c->TakeAllLive([this](DevicePtr p, const LiveBlock& live) { live_.Insert(p, live); });
  tally_ += c->tally;
  bytes_.g.fetch_sub(c->credit, std::memory_order_relaxed);
  count_.g.fetch_sub(c->count_credit, std::memory_order_relaxed);
  c->credit = 0;
  c->count_credit = 0;
  c->tally = {};
  c->Detach();
  std::erase_if(caches_, [c](const std::shared_ptr<ThreadCache>& p) { return p.get() == c; });
}

bool CachingAllocator::FlushCaches(bool large_only) {
  bool any = false;
  auto release = [this](DevicePtr p, const LiveBlock& live) { ReleaseBlock(p, live); };
  for (const std::shared_ptr<ThreadCache>& c : caches_) {
    std::lock_guard cl(c->mu());
    any |= large_only ? c->DrainLargeUnderPressure(release) : c->Drain(release);
  }
  return any;
}

bool CachingAllocator::TakeFromCaches(DevicePtr ptr, LiveBlock* out) {
  for (const std::shared_ptr<ThreadCache>& c : caches_) {
    std::lock_guard cl(c->mu());
    if (c->Take(ptr, out)) return true;
  }
  return false;
}

bool CachingAllocator::RecordInCaches(DevicePtr ptr, StreamId stream, StreamId* own) {
  for (const std::shared_ptr<ThreadCache>& c : caches_) {
    std::lock_guard cl(c->mu());
    if (LiveBlock* live = c->FindLive(ptr)) {
      *own = live->stream;
      if (*own != stream) live->recorded = true;
      return true;
    }
  }
  return false;
}

}  // namespace gpumem
