// The caching allocator (the policy is described in caching_allocator.h): the class, shared
// by the files that implement it, each one part of it:
//   caching_allocator.cc      construction, the locked path's heaps, slabs and large blocks,
//                             record_stream
//   caching_thread_caches.cc  the per-thread caches in front of the lock
//   caching_accounting.cc     the live totals and their peaks, stats and detailed stats
//   caching_pools.cc          private pools and stream capture
//   caching_growth.cc         growth when no free block fits, trims, OOMs, empty_cache
//   caching_layout.cc         the memory layout for snapshots
// The locked alloc and free, all that a single thread takes, are defined here, inline, so
// that they compile into few calls (bench/c_api_pair_count counts them). What they call
// only when something is missing (a heap, a slab, a fit) or unusual (other streams, pools,
// observers) is out of line, in the files above.
// Internal to the allocator: everyone else includes caching_allocator.h.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "allocator/allocator_mutex.h"
#include "allocator/backend.h"
#include "allocator/background_unmapper.h"
#include "allocator/caching_allocator.h"
#include "allocator/device_allocator.h"
#include "allocator/large_pool.h"
#include "allocator/live_map.h"
#include "allocator/observer.h"
#include "allocator/page_heap.h"
#include "allocator/size_classes.h"
#include "allocator/small_pool.h"
#include "allocator/stream_guard.h"
#include "allocator/thread_cache.h"
#include "allocator/usage_meter.h"

namespace gpumem {

// What a heap holds (CachingAllocatorOptions::medium_limit): the medium heap, blocks up to
// the medium limit and the slabs; the large heap, larger blocks (everything without a
// medium heap, and every block of a private pool). Kept apart, blocks that outlive the
// large ones around them do not pin the pages those leave behind.
enum class HeapKind : std::uint8_t { kLarge, kMedium };
inline constexpr std::size_t kHeapKinds = 2;

struct HeapKey {
  PoolId pool;
  StreamId stream;
  HeapKind kind;

  template <typename H>
  friend H AbslHashValue(H h, const HeapKey& k) {
    return H::combine(std::move(h), k.pool, k.stream, k.kind);
  }
  friend bool operator==(const HeapKey&, const HeapKey&) = default;
};

struct StreamHeap {
  StreamHeap(PageHeap& pages, std::size_t range_va, const HeapKey& key)
      : large(pages, range_va, key.stream), stream(key.stream), pool(key.pool), kind(key.kind) {}
  LargePool large;  // declared first: slabs live in its blocks, so it goes last
  SmallPool small;
  StreamId stream;
  PoolId pool;
  HeapKind kind;
  // Blocks this heap lent (CachingAllocator::Borrow), freed by their borrowers: back in
  // the heap at once, each fenced by an event recorded on its borrower's stream at the
  // free. Before that memory is used again this heap's stream waits for the event on the
  // device (CachingAllocator::WaitForFences); completed fences are dropped.
  struct Fence {
    DevicePtr addr;
    std::size_t size;
    StreamId stream;  // the borrower's
    EventHandle event;
    // This heap's stream waits for it already. The fence stays until its work ran: a
    // later borrower of the memory waits for it too.
    bool waited = false;
  };
  std::vector<Fence> fences;
  // An event recorded on this heap's stream when its free count was `checkpoint_at`: a
  // borrower of a block last used by this stream before then waits for it
  // (CachingAllocator::OrderAfterUsers); 0: none. Once it is seen complete, its event
  // goes and `ran_at` keeps its count: blocks last used before then need no wait.
  EventHandle checkpoint = 0;
  std::uint32_t checkpoint_at = 0;
  std::optional<std::uint32_t> ran_at;
};

// Requests beyond this cannot be rounded without overflow; no device has that much.
inline constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

// One shared total of the accounting (see CachingAllocator::AddFast) and its peak.
struct SharedTotal {
  std::atomic<std::uint64_t> g{0};
  std::atomic<std::uint64_t> peak{0};

  // Adds `n` unless that would pass the peak.
  bool TryAdd(std::uint64_t n) {
    std::uint64_t v = g.load(std::memory_order_relaxed);
    do {
      if (v + n > peak.load(std::memory_order_relaxed)) return false;
    } while (!g.compare_exchange_weak(v, v + n, std::memory_order_relaxed));
    return true;
  }
  // Sets the total to `v` (every writer excluded), raising the peak; whether it rose.
  bool Set(std::uint64_t v) {
    g.store(v, std::memory_order_relaxed);
    if (v <= peak.load(std::memory_order_relaxed)) return false;
    peak.store(v, std::memory_order_relaxed);
    return true;
  }
  std::uint64_t get() const { return g.load(std::memory_order_relaxed); }
  std::uint64_t max() const { return peak.load(std::memory_order_relaxed); }
};

// What an allocation could not add to the shared totals without passing a peak.
struct Rest {
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
  bool any() const { return bytes != 0 || count != 0; }
};

// Blocks and bytes, live or active, of one kind (DetailedStats::Kind).
struct KindFigures {
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  std::uint64_t active_count = 0;
  std::uint64_t active_bytes = 0;
  void Raise(const KindFigures& now) {
    count = std::max(count, now.count);
    bytes = std::max(bytes, now.bytes);
    active_count = std::max(active_count, now.active_count);
    active_bytes = std::max(active_bytes, now.active_bytes);
  }
};

class CachingAllocator final : public DeviceAllocator, private ThreadCacheOwner {
 public:
  CachingAllocator(Backend& backend, CachingAllocatorOptions options);
  ~CachingAllocator() override;

  std::string_view name() const override { return "gpumem"; }

  // The cached paths apart: the locked ones then keep small frames (no registers saved
  // for the cached paths' locals).
  absl::StatusOr<DevicePtr> Allocate(std::size_t bytes, StreamId stream) override {
    if (Caching() && bytes <= kMaxRequest) return AllocateCached(bytes, stream);
    return AllocateLocked(bytes, stream, nullptr, kDefaultPool);
  }
  void Free(DevicePtr ptr) override { FreeIfOwned(ptr); }
  bool FreeIfOwned(DevicePtr ptr) override {
    return Caching() ? FreeCached(ptr) : FreeLocked(ptr);
  }
  bool Owns(DevicePtr ptr) const override;
  std::size_t BlockBytes(DevicePtr ptr) const override;
  bool RecordStream(DevicePtr ptr, StreamId stream) override;

  // caching_growth.cc
  void EmptyCache() override;
  void ReleaseIdle() override;
  void KeepHeadroom() override;
  OomReport last_oom() const override;

  // caching_accounting.cc
  AllocatorStats stats() const override;
  void ResetPeaks() override;
  DetailedStats detailed_stats() const override;
  void ResetAccumulated() override;

  // caching_pools.cc
  absl::StatusOr<DevicePtr> AllocateInPool(std::size_t bytes, StreamId stream,
                                           PoolId pool) override;
  absl::StatusOr<DevicePtr> AllocateAt(DevicePtr addr, std::size_t bytes, StreamId stream,
                                       PoolId pool) override;
  void BeginCapture() override;
  void EndCapture() override;
  void ReleasePool(PoolId pool) override;
  void EmptyPoolCache(PoolId pool) override;
  std::vector<DevicePtr> PoolLiveBlocks(PoolId pool) const override;

  // caching_layout.cc
  std::vector<LayoutSegment> Layout() const override;

 private:
  // Whether `ptr` is a live block (not freed, cached or waiting on other streams), and the
  // bytes asked for it.
  bool FindLive(DevicePtr ptr, std::size_t* requested) const;
  // Holds every cache's lock (after mu_): their counters stand still.
  class LockedCaches {
   public:
    explicit LockedCaches(const std::vector<std::shared_ptr<ThreadCache>>& caches)
        : caches_(caches) {
      for (const auto& c : caches_) c->mu().lock();
    }
    ~LockedCaches() {
      for (const auto& c : caches_) c->mu().unlock();
    }
    LockedCaches(const LockedCaches&) = delete;
    LockedCaches& operator=(const LockedCaches&) = delete;

   private:
    const std::vector<std::shared_ptr<ThreadCache>>& caches_;
  };

  // --- The locked path.

  // Takes mu_ (the caller adopts it), noting contention: caches start once threads keep
  // meeting at the lock (CachingAllocatorOptions::thread_cache_single_thread). Whether the
  // lock is held is one load of the line that the lock is about to take anyway.
  void LockNotingContention() {
    const bool held = mu_.held();
    mu_.lock();
    if (held) ++contended_calls_;
    if (cache_on_ && ++locked_calls_ >= options_.thread_cache_lock_window) {
      if (contended_calls_ >= options_.thread_cache_contended_calls) {
        caching_.store(true, std::memory_order_relaxed);
      }
      locked_calls_ = 0;
      contended_calls_ = 0;
    }
  }

  absl::StatusOr<DevicePtr> AllocateLocked(std::size_t bytes, StreamId stream, ThreadCache* c,
                                           PoolId pool) {
    LockNotingContention();
    std::lock_guard lock(mu_, std::adopt_lock);
    if (bytes > kMaxRequest) return Oom(bytes, stream, pool);
    if (!guard_.empty() && !Capturing()) CollectPending();
    if (fences_ != 0) CollectFencesSometimes();
    ReleaseDonePools();
    if (pool != kDefaultPool) PoolInUse(pool);
    StreamHeap* h = Heap(stream, pool, KindFor(bytes, pool));
    LiveBlock live{.heap = h, .stream = stream, .requested = bytes};
    DevicePtr ptr;
    // A pool's blocks all come from its large pool: AllocateAt can then restore any of
    // them where it was.
    if (bytes <= options_.small_limit && pool == kDefaultPool) {
      const int k = SizeClasses::ClassOf(bytes);
      live.bin = SizeClasses::ClassSize(k);
      live.size_class = k;
      ptr = h->small.Allocate(k, &live.slab);
      if (ptr == 0) {
        if (!AddSlabFor(*h, k)) return Oom(bytes, stream, pool);
        ptr = h->small.Allocate(k, &live.slab);
      }
    } else {
      // Best fit first, here: through AllocateLargeBlock and AllocateLarge it costs ~45
      // instructions more a pair. A cache's large blocks go back before it (see there);
      // a miss asks again there, on the way to growth.
      Block* b = c == nullptr ? h->large.BestFit(RoundUp(bytes, kBlockAlign)) : nullptr;
      if (b == nullptr) b = AllocateLargeBlock(*h, bytes, c, &live);
      if (b == nullptr) return Oom(bytes, stream, pool);
      // A borrowed block's stream waited for its fences already (OrderAfterUsers). The
      // block's heap may be another of this stream's (LargeHeapPiece).
      if (!live.borrowed && !live.heap->fences.empty()) {
        WaitForFences(*live.heap, b->addr, b->size);
      }
      live.block = b;
      live.bin = b->size;
      ptr = b->addr;
    }
    if (pool != kDefaultPool) PoolBlockAdded(pool);
    // Asked once: the answer decides both this event and, later, the free's.
    live.unseen = !ObservesAllocation();
    Account(ptr, live, c);
    if (!live.unseen) Notify(AllocatorEventKind::kAlloc, ptr, bytes, stream);
    return ptr;
  }

  // Records a block just handed out and adds it to the totals; mu_ held. Inlined where
  // GCC's size limits would keep it apart (~15 instructions a pair).
  [[gnu::always_inline]] void Account(DevicePtr ptr, const LiveBlock& live, ThreadCache* c) {
    if (c != nullptr) {
      AccountInCache(ptr, live, c);
      return;
    }
    live_.Insert(ptr, live);
    tally_.OnAlloc(live.requested, live.size_class >= 0);
    if (!Caching()) {
      AddAlone(live.requested);
      return;
    }
    const Rest rest = AddFast(nullptr, live.requested);
    if (rest.any()) AddSlow(rest);
  }

  bool FreeLocked(DevicePtr ptr) {
    LockNotingContention();
    std::lock_guard lock(mu_, std::adopt_lock);
    LiveBlock* r = live_.Find(ptr);
    if (r == nullptr) return RetireFromCaches(ptr);  // false: not ours, or freed already
    if (r->pending) return false;                    // freed already
    // A pending block keeps its record, marked, where it is.
    if (Retire(ptr, *r)) return true;
    live_.Erase(r);
    ReleaseDonePools();
    return true;
  }

  // A live block's free (mu_ held): back to its pool, or pending (marked so) when other
  // streams used it; whether it is pending. live_ is left as it is.
  bool Retire(DevicePtr ptr, LiveBlock& live) {
    if (!used_on_.empty() && RetireUsedElsewhere(ptr, live)) return true;
    if (live.borrowed) return RetireBorrowed(ptr, live);
    CountFree(ptr, live);
    ReleaseBlock(ptr, live);
    return false;
  }
  // Takes a freed block off the totals and tells the observer.
  void CountFree(DevicePtr ptr, const LiveBlock& live) {
    SubLiveLocked(live.requested);
    tally_.OnFree(live.requested, live.size_class >= 0);
    if (!live.unseen) Notify(AllocatorEventKind::kFree, ptr, live.requested, live.stream);
  }

  // `stream_used`: the heap's own stream may have used it (LargePool::Free).
  void ReleaseBlock(DevicePtr ptr, const LiveBlock& live, bool stream_used = true) {
    if (live.slab != nullptr) {
      live.heap->small.Free(live.slab, ptr);
    } else {
      live.heap->large.Free(live.block, stream_used);
    }
    if (live.heap->pool != kDefaultPool) PoolBlockReleased(live.heap->pool);
  }

  // A private pool's blocks all come from its large heap: AllocateAt restores them there.
  HeapKind KindFor(std::size_t bytes, PoolId pool) const {
    return bytes <= options_.medium_limit && pool == kDefaultPool ? HeapKind::kMedium
                                                                 : HeapKind::kLarge;
  }

  StreamHeap* Heap(StreamId stream, PoolId pool, HeapKind kind) {
    StreamHeap* last = last_heap_[static_cast<std::size_t>(kind)];
    if (last != nullptr && last->stream == stream && last->pool == pool) return last;
    return FindHeap({pool, stream, kind});
  }

  // Returns the memory of released pools whose last block is gone (mu_ held). Not during
  // a capture: it unmaps.
  void ReleaseDonePools() {
    if (pool_done_ && !Capturing()) ReleaseDonePoolsNow();
  }

  bool Capturing() const { return capture_depth_ > 0; }

  bool ObservesAllocation() const {
    return options_.observer != nullptr && block_events_ &&
           options_.observer->RecordsAllocations();
  }

  // kAlloc and kFree come here only for blocks ObservesAllocation() let through.
  void Notify(AllocatorEventKind kind, DevicePtr ptr, std::size_t bytes, StreamId stream) {
    if (options_.observer != nullptr) {
      options_.observer->OnEvent({kind, options_.device, ptr, bytes, stream});
    }
  }

  // --- Heaps, slabs and large blocks of the locked path (caching_allocator.cc).

  // The heap of `key`, made on first use.
  StreamHeap* FindHeap(const HeapKey& key);
  // A new slab of class `k` in `h`; false when no memory can be had for it.
  bool AddSlabFor(StreamHeap& h, int k);
  void AddSlab(StreamHeap& h, int k, Block* b);
  // A large block of `bytes` (as requested) for cache `c`'s thread; null when none can be
  // had. One of another stream's heap (Borrow) updates `live`.
  Block* AllocateLargeBlock(StreamHeap& h, std::size_t bytes, ThreadCache* c, LiveBlock* live);
  // Retire() of a block that RecordStream put on other streams; false for any other.
  bool RetireUsedElsewhere(DevicePtr ptr, LiveBlock& live);
  // Holds a freed block until work queued on `streams` has run.
  void DeferFree(DevicePtr ptr, std::vector<StreamId> streams);
  // A live block's free that waits for `streams`: pending, counted active until it ends.
  void HoldFreed(DevicePtr ptr, LiveBlock& live, std::vector<StreamId> streams);
  // Retire() of a borrowed block: freed for the program and back in its lender's heap at
  // once, fenced (StreamHeap::fences) until the borrower's stream has run past the free.
  // During a capture, which records no event the allocator could query, it is pending as
  // a record_stream'd block's free is.
  bool RetireBorrowed(DevicePtr ptr, LiveBlock& live);
  // `h`'s stream waits on the device for the fences over [addr, addr + size) it has not
  // waited for yet; they stay up (marked) for other streams that borrow the memory.
  void WaitForFences(StreamHeap& h, DevicePtr addr, std::size_t size);
  // ... for all of `h`'s fences: at a capture's start, which may not wait on events
  // recorded outside it. (A stitch waits only for the fences over the pages it lends:
  // FenceWaiter.)
  void WaitForAllFences(StreamHeap& h);
  // Drops the fences whose borrower's work has run, and the checkpoints that have run
  // (StreamHeap::checkpoint); all of them when `synchronized`.
  void CollectFences(bool synchronized = false);
  // CollectFences on every kCollectEvery-th allocation: each asks the device (an event
  // query costs ~1.6 us on an H100), and a training step allocates hundreds of times while
  // a fence is up. A fence still up when its memory is used again costs a stream wait.
  static constexpr std::uint32_t kCollectEvery = 8;
  void CollectFencesSometimes();
  // Releases the blocks whose pending frees have completed: all of them when
  // `synchronized` (the device was waited for in this slow path, after every free).
  void CollectPending(bool synchronized = false);

  // --- Thread caches (caching_thread_caches.cc).

  // Whether calls go through thread caches (set under mu_: see AddAlone).
  bool Caching() const { return caching_.load(std::memory_order_relaxed); }
  // Allocate() from this thread's cache, else (its bin empty) from the pools.
  absl::StatusOr<DevicePtr> AllocateCached(std::size_t bytes, StreamId stream);
  // FreeIfOwned() through this thread's cache where it holds the block's record, else on
  // the locked path.
  bool FreeCached(DevicePtr ptr);
  // Account() of a block recorded in cache `c`.
  void AccountInCache(DevicePtr ptr, const LiveBlock& live, ThreadCache* c);
  // FreeLocked() of a live block recorded in some thread's cache; false if none holds it.
  bool RetireFromCaches(DevicePtr ptr);
  // This thread's cache; with `create`, made and registered on first use.
  ThreadCache* MyCache(bool create);
  // Thread exit: the cache's blocks go back to the pools, its records to live_.
  void DetachThreadCache(ThreadCache* c) override;
  // Every thread's cached blocks back to the pools; whether there were any. mu_ held.
  // `large_only`: the large ones, for a large block that did not fit (see AllocateSlow).
  bool FlushCaches(bool large_only = false);
  // A live block recorded in some thread's cache, taken out of it; mu_ held.
  bool TakeFromCaches(DevicePtr ptr, LiveBlock* out);
  // RecordStream of a block recorded in a cache: its free must take the lock.
  bool RecordInCaches(DevicePtr ptr, StreamId stream, StreamId* own);

  // --- Accounting, exact without a shared write per cached pair. Two shared totals,
  // bytes_ and count_ (live blocks), work alike; for bytes: bytes_.g (G) is the shared
  // total minus nothing: a block freed through a cache adds its bytes to that cache's
  // credit instead of subtracting them from G, so the true total is A = G - (every cache's
  // credit), and G >= A. Invariant: the peak (P) >= G, and P is only ever set to a true
  // total. An allocation first spends its cache's credit (A rises, G does not, so A <= G
  // <= P: no new peak missed); the rest is added to G only while G stays <= P
  // (compare-and-swap); otherwise AddSlow folds every credit into G (G = A) under every
  // lock, adds, and raises P to the exact total. A thread reusing what it freed thus
  // touches nothing shared. While blocks wait for other streams (pending), active = live +
  // pending can peak without the live total doing so: then every allocation takes AddSlow
  // (pending_any_). The rest of it is in caching_accounting.cc.

  // Adds an allocation of `bytes` for cache `c` (its lock held; null: no cache, mu_
  // held). Returns what could not be added without passing a peak: the caller gives it
  // to AddSlow.
  Rest AddFast(ThreadCache* c, std::uint64_t bytes) {
    Rest rest{bytes, 1};
    if (pending_any_.load(std::memory_order_relaxed)) return rest;
    if (c != nullptr) {
      const std::uint64_t spent = std::min(c->credit, bytes);
      c->credit -= spent;
      rest.bytes -= spent;
      if (c->count_credit > 0) {
        --c->count_credit;
        rest.count = 0;
      }
    }
    if (rest.bytes != 0 && bytes_.TryAdd(rest.bytes)) rest.bytes = 0;
    if (rest.count != 0 && count_.TryAdd(rest.count)) rest.count = 0;
    return rest;
  }
  // One thread alone (before caching_, which is set under mu_): nothing changes the totals
  // without mu_, so plain stores do (a locked add costs ~10 ns of a ~50 ns pair). No cache
  // exists yet, so tally_ is the whole tally.
  void AddAlone(std::uint64_t bytes) {
    const bool raised = bytes_.Set(bytes_.get() + bytes);
    count_.Set(count_.get() + 1);
    if (raised || pending_count_ != 0) SamplePeaks(tally_);
  }
  // mu_ held. G only falls: P >= G holds.
  void SubLiveLocked(std::uint64_t bytes) {
    if (Caching()) {
      bytes_.g.fetch_sub(bytes, std::memory_order_relaxed);
      count_.g.fetch_sub(1, std::memory_order_relaxed);
    } else {
      bytes_.g.store(bytes_.get() - bytes, std::memory_order_relaxed);
      count_.g.store(count_.get() - 1, std::memory_order_relaxed);
    }
  }
  // mu_ held, no cache's lock.
  void AddSlow(Rest rest);
  // mu_ and every cache's lock held: G = A, no credit left; returns the totals.
  Rest FoldCredits();
  // The exact totals: mu_ held, no cache's lock.
  Rest ExactLive() const;
  // The same with mu_ and every cache's lock held.
  Rest LiveCachesHeld() const;
  // Every allocation and free so far: mu_ and every cache's lock held.
  AllocTally TotalTally() const;
  // Live and active blocks of kind `k` (DetailedStats::Kind) from the exact tally `t`.
  KindFigures Figures(const AllocTally& t, int k) const;
  // Raises the sampled peaks to the figures now (mu_ held, `t` exact).
  void SamplePeaks(const AllocTally& t);
  // Blocks begin to wait for other streams: from now until none does, allocations take
  // AddSlow. Cached paths in flight finish first (every cache's lock is taken).
  void BeginPending();
  void AddPending(const LiveBlock& live);
  void SubPending(const LiveBlock& live);
  // Raises the peaks of reserved bytes and segments to the figures now (mu_ held).
  void SampleReserved();
  // detailed_stats() with cumulative figures since the allocator started; mu_ held.
  DetailedStats RawDetailedStats() const;
  // allocation, active and the bytes of both; every lock held.
  void FillBlockStats(DetailedStats& s, const AllocTally& t, std::uint64_t peak_bytes,
                      std::uint64_t peak_count) const;
  // reserved_bytes and segment; mu_ held.
  void FillReservedStats(DetailedStats& s) const;

  // --- Private pools and capture (caching_pools.cc).

  // Pool `pool` gets a block: it is in use (again).
  void PoolInUse(PoolId pool);
  void PoolBlockAdded(PoolId pool);
  void PoolBlockReleased(PoolId pool);
  void ReleaseDonePoolsNow();
  // Every heap of `pool` unmapped and its ranges released (no block of it is in use).
  void DestroyPoolHeaps(PoolId pool);
  // Whether trims and EmptyCache may release the heap's free memory: not a pool in use.
  bool Reclaimable(const StreamHeap& h) const;

  // --- Growth and giving memory back (caching_growth.cc).

  using HeapFilter = absl::FunctionRef<bool(const StreamHeap&)>;
  // `borrower`: the record of the block to be handed out, which may then come from
  // another stream's heap (Borrow); null: `h`'s own blocks only (slabs).
  Block* AllocateLarge(StreamHeap& h, std::size_t bytes, LiveBlock* borrower = nullptr);
  Block* LargeHeapPiece(StreamHeap& h, std::size_t bytes, LiveBlock* live);
  bool CannotFit(std::size_t bytes);
  Block* AllocateCapturing(StreamHeap& h, std::size_t bytes);
  Block* AllocateSlow(StreamHeap& h, std::size_t bytes, LiveBlock* borrower);
  Block* AttemptGrowth(StreamHeap& h, std::size_t bytes, int attempt, LiveBlock* borrower);
  Block* Borrow(StreamHeap& h, std::size_t bytes, LiveBlock* borrower);
  // Work queued on `waiter` from now on runs after `event` (on the device); where that
  // wait fails, the device is waited for.
  void OrderAfter(StreamId waiter, EventHandle event);
  enum class HeadroomUse {
    kKept,          // growth leaves the driver the headroom, or creates nothing
    kEaten,         // it would fit only by taking the headroom: refused
    kBeyondDevice,  // the driver has less than it needs anyway
  };
  HeadroomUse HeadroomFor(StreamHeap& h, std::size_t bytes) const;
  std::uint64_t NewBytesFor(const StreamHeap& h, std::size_t bytes) const;
  Block* GrowFromIdle(StreamHeap& h, std::size_t bytes);
  absl::StatusOr<Block*> Grow(StreamHeap& h, std::size_t bytes, bool budget);
  std::size_t TakeIdlePagesFor(StreamHeap& h, std::size_t want, const Block* keep, bool* lent);
  LargePool::LendHook FenceWaiter(StreamHeap& h);
  std::size_t TakeOtherStreamPages(StreamHeap& from, StreamHeap& to, std::size_t want,
                                   bool* lent);
  bool NewPagesFit(const StreamHeap& h, std::size_t pages, std::size_t bytes) const;
  std::uint64_t BudgetPeak(const StreamHeap& h, std::size_t bytes) const;
  void ReleaseAllCached();
  void ReleaseCachedOf(HeapFilter which);
  void CollectIdleOf(HeapFilter which);
  void GiveBackIdle();
  void GiveBackIdleForOthers();
  bool HoldsIdle() const;
  // The largest request into `pool` that its heaps could serve now without new memory.
  std::uint64_t LargestFree(PoolId pool) const;
  // Free bytes in the heaps of private pools other than `pool`: memory no request into
  // `pool` can use while their graphs or MemPools live.
  std::uint64_t OtherPoolsFree(PoolId pool) const;
  void OrderAfterUsers(StreamHeap& lender, const Block& b, StreamId borrower);
  void StartUnmapper();
  void RetireLent();
  std::size_t EmptySlabBytes() const;
  void ReleaseEmptySlabs();
  void ReleaseEmptySlabs(StreamHeap& h);
  absl::Status Oom(std::size_t bytes, StreamId stream, PoolId pool);

  // --- The layout (caching_layout.cc).

  // The record of a block handed out (live, pending, or cached in a thread); null for
  // none. mu_ and every cache's lock held.
  const LiveBlock* FindRecord(DevicePtr ptr) const;
  bool LayoutBlockAt(DevicePtr ptr, std::size_t size, bool free, LayoutBlock* out) const;
  void AppendLayout(const StreamHeap& h, std::vector<LayoutSegment>* out) const;
  LayoutSegment SlabSegment(const Slab& s, const LayoutSegment& empty) const;

  using KindPeaks = std::array<std::uint64_t, 3>;

  mutable AllocatorMutex mu_;
  Backend& backend_;
  CachingAllocatorOptions options_;
  PageHeap pages_;  // outlives the heaps, which return their pages to it
  StreamGuard guard_;
  // Outlives the heaps, whose pools hand it their lent pages' old addresses.
  std::unique_ptr<BackgroundUnmapper> unmapper_;
  // What the heaps of each kind hand out (declared before heaps_, which count on them).
  std::array<UsageMeter, kHeapKinds> handed_out_;
  // By (pool, stream, kind): a pool's blocks come only from its own heaps.
  absl::flat_hash_map<HeapKey, std::unique_ptr<StreamHeap>> heaps_;
  std::array<StreamHeap*, kHeapKinds> last_heap_{};  // the heap last found, per kind
  // Live blocks not recorded in a thread cache (cache off, pending, or their thread gone).
  LiveMap live_;
  absl::flat_hash_map<DevicePtr, std::vector<StreamId>> used_on_;  // RecordStream
  std::size_t fences_ = 0;           // fences up in every heap (StreamHeap::fences)
  EventQueries fence_queries_;       // CollectFences' questions
  std::uint32_t collect_tick_ = 0;  // CollectFencesSometimes
  AllocatorStats stats_;  // figures of the locked paths; the caches keep their own
  AllocTally tally_;      // allocations and frees of the locked paths
  const std::uint64_t id_;  // this allocator, to the threads' caches
  const bool block_events_;  // the observer wants kAlloc and kFree
  const bool cache_on_;
  const ThreadCacheLimits limits_;
  std::vector<std::shared_ptr<ThreadCache>> caches_;  // every thread's cache
  std::atomic<bool> caching_;        // Caching()
  std::uint32_t locked_calls_ = 0;     // LockNotingContention's window (mu_)
  std::uint32_t contended_calls_ = 0;  // of which found the lock held
  // Changed without mu_ by cached calls; alone on their line, away from mu_.
  alignas(64) SharedTotal bytes_;  // requested bytes of live blocks
  SharedTotal count_;              // live blocks
  std::atomic<bool> pending_any_{false};  // pending_count_ != 0: see AddFast
  alignas(64) OomReport last_oom_;
  // Blocks freed, waiting for other streams (StreamGuard or capture_deferred_).
  std::uint64_t pending_count_ = 0;
  std::uint64_t pending_bytes_ = 0;
  std::uint64_t pending_small_count_ = 0;
  std::uint64_t pending_small_bytes_ = 0;
  // Peaks of live and active blocks by kind, sampled when the live total's peak rises,
  // while blocks are pending, and at reads (kAll's live peaks are bytes_ and count_).
  KindFigures kind_peaks_[3];
  KindPeaks reserved_peaks_{};  // sampled after growth and new slabs
  KindPeaks segment_peaks_{};
  std::uint64_t slab_bytes_added_ = 0;  // cumulative
  std::uint64_t slab_bytes_removed_ = 0;
  std::uint64_t slabs_added_ = 0;
  std::uint64_t slabs_removed_ = 0;
  std::uint64_t retries_ = 0;  // allocations that stitched or trimmed
  DetailedStats accumulated_base_;  // cumulative figures at ResetAccumulated
  // Private pools with blocks or cached memory.
  struct PoolState {
    std::size_t live = 0;   // live and pending blocks
    bool released = false;  // ReleasePool: its memory goes once live is 0
  };
  absl::flat_hash_map<PoolId, PoolState> pools_;
  bool pool_done_ = false;  // some released pool has no block left
  int capture_depth_ = 0;   // BeginCapture - EndCapture
  struct DeferredFree {
    DevicePtr ptr;
    std::vector<StreamId> streams;
  };
  std::vector<DeferredFree> capture_deferred_;  // RecordStream'd frees during a capture
  std::uint64_t stitched_bytes_ = 0;  // bytes of idle pages ever remapped: raises the budget
  bool refused_for_headroom_ = false;  // the last growth would have eaten the headroom
  // Reserved bytes when idle memory last went back for other libraries (KeepHeadroom,
  // ReleaseIdle), the most of them: growth back to it takes the headroom only because
  // those libraries took the memory this allocator had held (HeadroomFor).
  std::uint64_t given_for_others_ = 0;
};

}  // namespace gpumem
