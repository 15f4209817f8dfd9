// The caching allocator's construction, and what its locked path reaches for when the
// inline part (caching_allocator_impl.h) finds something missing: a heap, a slab, a large
// block, a block used on other streams.
#include "allocator/caching_allocator.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "allocator/caching_allocator_impl.h"

namespace gpumem {
namespace {

// Growth room per range. A range grown in place maps only the pages its block lacks,
// where one without room moves every page to a fresh range: FSDP2's logits-sized blocks
// (~1 GB, grown from ranges made for smaller ones) map ~10% fewer pages with 16 GiB than
// with 4 GiB, and nothing gains beyond. Up to ~200 ranges are live (~3.2 TiB of address
// space, far from the GPU's limit); where the address space refuses, a range gets its
// request's size. A larger request gets a range of its own size.
constexpr std::size_t kMaxRangeVa = std::size_t{16} << 30;

}  // namespace

CachingAllocator::CachingAllocator(Backend& backend, CachingAllocatorOptions options)
    : backend_(backend),
      options_(options),
      pages_(backend, options.device, options.observer, options.page_bytes),
      guard_(backend),
      fence_queries_(backend),
      id_(ThreadCaches::NewOwnerId()),
      block_events_(options.observer != nullptr && options.observer->wants_block_events()),
      // An observer of blocks is told of every alloc and free in the order they happen,
      // under the lock (the trace is replayed in that order): then every call takes it.
      cache_on_(options.thread_cache && !block_events_),
      limits_{options.thread_cache_bin_entries, options.thread_cache_bytes},
      caching_(cache_on_ && options.thread_cache_single_thread) {
  options_.small_limit = std::min(options_.small_limit, kSmallLimit);
  // A medium heap only for blocks above the slabs' sizes.
  if (options_.medium_limit <= options_.small_limit) options_.medium_limit = 0;
  if (options_.range_va_bytes == 0) {
    options_.range_va_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(
        RoundUp(backend.capacity(), pages_.page_bytes()), kMaxRangeVa));
  }
  live_.reserve(1024);
}

CachingAllocator::~CachingAllocator() {
  // Threads that used this allocator may live on: their caches are cut loose here, under
  // the registry lock that their exit takes too.
  if (cache_on_) {
    std::lock_guard reg(RegistryMutex());
    std::lock_guard lock(mu_);
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      std::lock_guard cl(c->mu());
      c->Clear();
      c->Detach();
    }
    caches_.clear();
  }
  // Waits for queued work, so pages can be unmapped; the heaps return everything.
  pages_.BeginSlowPath();
  pages_.Quiesce();
  CollectFences(/*synchronized=*/true);
}

bool CachingAllocator::FindLive(DevicePtr ptr, std::size_t* requested) const {
  std::lock_guard lock(mu_);
  if (const LiveBlock* r = live_.Find(ptr)) {
    *requested = r->requested;
    return !r->pending;
  }
  for (const std::shared_ptr<ThreadCache>& c : caches_) {
    std::lock_guard cl(c->mu());
    const LiveBlock* r = c->FindRecord(ptr);
    if (r != nullptr) {
      *requested = r->requested;
      return !r->cached;
    }
  }
  return false;
}

bool CachingAllocator::Owns(DevicePtr ptr) const {
  std::size_t requested = 0;
  return FindLive(ptr, &requested);
}

std::size_t CachingAllocator::BlockBytes(DevicePtr ptr) const {
  std::size_t requested = 0;
  return FindLive(ptr, &requested) ? requested : 0;
}

bool CachingAllocator::RecordStream(DevicePtr ptr, StreamId stream) {
  std::lock_guard lock(mu_);
  StreamId own;
  if (const LiveBlock* r = live_.Find(ptr)) {
    if (r->pending) return false;
    own = r->stream;
  } else if (!RecordInCaches(ptr, stream, &own)) {
    return false;
  }
  if (own == stream) return true;
  std::vector<StreamId>& streams = used_on_[ptr];
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) {
    streams.push_back(stream);
  }
  return true;
}

StreamHeap* CachingAllocator::FindHeap(const HeapKey& key) {
  std::unique_ptr<StreamHeap>& h = heaps_[key];
  if (h == nullptr) {
    h = std::make_unique<StreamHeap>(pages_, options_.range_va_bytes, key);
    h->large.set_unmapper(unmapper_.get());
    // A pool's heaps go only once none of its blocks is out (DestroyPoolHeaps).
    h->large.set_meter(&handed_out_[static_cast<std::size_t>(key.kind)]);
  }
  last_heap_[static_cast<std::size_t>(key.kind)] = h.get();
  return h.get();
}

bool CachingAllocator::AddSlabFor(StreamHeap& h, int k) {
  Block* b = AllocateLarge(h, SizeClasses::SlabBytes(k));
  if (b == nullptr) return false;
  if (!h.fences.empty()) WaitForFences(h, b->addr, b->size);
  AddSlab(h, k, b);
  return true;
}

void CachingAllocator::AddSlab(StreamHeap& h, int k, Block* b) {
  h.small.AddSlab(k, b);
  slab_bytes_added_ += b->size;
  ++slabs_added_;
  SampleReserved();
}

Block* CachingAllocator::AllocateLargeBlock(StreamHeap& h, std::size_t bytes, ThreadCache* c,
                                            LiveBlock* live) {
  // This thread's cached large blocks go back before best fit: it would have picked among
  // them without the cache, and a smaller free block than the fit it needs split for it
  // fragments the layout (replays with caches on: more maps in steady steps).
  if (c != nullptr) {
    std::lock_guard cl(c->mu());
    c->DrainLargeBlocks([this](DevicePtr p, const LiveBlock& l) { ReleaseBlock(p, l); });
  }
  return AllocateLarge(h, RoundUp(bytes, kBlockAlign), live);
}

bool CachingAllocator::RetireUsedElsewhere(DevicePtr ptr, LiveBlock& live) {
  auto u = used_on_.find(ptr);
  if (u == used_on_.end()) return false;
  std::vector<StreamId> streams = std::move(u->second);
  used_on_.erase(u);
  if (live.borrowed) streams.push_back(live.stream);  // the lender's stream waits for it
  HoldFreed(ptr, live, std::move(streams));
  return true;
}

void CachingAllocator::HoldFreed(DevicePtr ptr, LiveBlock& live, std::vector<StreamId> streams) {
  AddPending(live);  // before the live total falls: see AddFast
  CountFree(ptr, live);
  live.pending = true;
  DeferFree(ptr, std::move(streams));
}

bool CachingAllocator::RetireBorrowed(DevicePtr ptr, LiveBlock& live) {
  if (Capturing()) {
    HoldFreed(ptr, live, {live.stream});
    return true;
  }
  CountFree(ptr, live);
  live.heap->fences.push_back({ptr, live.bin, live.stream, backend_.RecordEvent(live.stream)});
  ++fences_;
  ReleaseBlock(ptr, live, /*stream_used=*/false);
  return false;
}

void CachingAllocator::WaitForFences(StreamHeap& h, DevicePtr addr, std::size_t size) {
  for (StreamHeap::Fence& f : h.fences) {
    if (f.waited || f.addr >= addr + size || addr >= f.addr + f.size) continue;
    OrderAfter(h.stream, f.event);
    f.waited = true;
  }
}

void CachingAllocator::WaitForAllFences(StreamHeap& h) {
  if (!h.fences.empty()) WaitForFences(h, 0, std::numeric_limits<DevicePtr>::max());
}

void CachingAllocator::CollectFences(bool synchronized) {
  fence_queries_.Reset();
  for (auto& [key, h] : heaps_) {
    if (h->checkpoint != 0 &&
        (synchronized || fence_queries_.Completed(h->stream, h->checkpoint))) {
      backend_.ReleaseEvent(h->checkpoint);
      h->checkpoint = 0;
      h->ran_at = h->checkpoint_at;
    }
    std::erase_if(h->fences, [&](const StreamHeap::Fence& f) {
      if (!synchronized && !fence_queries_.Completed(f.stream, f.event)) return false;
      backend_.ReleaseEvent(f.event);
      --fences_;
      return true;
    });
  }
}

void CachingAllocator::CollectFencesSometimes() {
  if (++collect_tick_ % kCollectEvery == 0) CollectFences();
}

// A capture records no event that the allocator would query: the events are recorded
// when it ends.
void CachingAllocator::DeferFree(DevicePtr ptr, std::vector<StreamId> streams) {
  if (Capturing()) {
    capture_deferred_.push_back({ptr, std::move(streams)});
  } else {
    guard_.Defer(ptr, streams);
  }
}

void CachingAllocator::CollectPending(bool synchronized) {
  guard_.Collect(
      [this](DevicePtr ptr) {
        LiveBlock* r = live_.Find(ptr);
        SubPending(*r);
        ReleaseBlock(ptr, *r);
        live_.Erase(r);
      },
      synchronized);
}

std::unique_ptr<DeviceAllocator> MakeCachingAllocator(Backend& backend,
                                                      CachingAllocatorOptions options) {
  return std::make_unique<CachingAllocator>(backend, options);
}

}  // namespace gpumem
