#include "allocator/caching_allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/large_pool.h"
#include "allocator/page_heap.h"
#include "allocator/size_classes.h"
#include "allocator/small_pool.h"
#include "allocator/stream_guard.h"
#include "allocator/thread_cache.h"

namespace gpumem {

struct StreamHeap {
  StreamHeap(PageHeap& pages, std::size_t range_va, StreamId s, PoolId p)
      : large(pages, range_va, s), stream(s), pool(p) {}
  LargePool large;  // declared first: slabs live in its blocks, so it goes last
  SmallPool small;
  StreamId stream;
  PoolId pool;
};

namespace {

// Growth room per range. Ranges in the real traces never outgrow 1 GiB (replays are the
// same from 1 to 64 GiB), while up to ~200 ranges are live: 4 GiB keeps the address space
// held (~800 GiB) far from the GPU's limit. A larger request gets a range of its own size.
constexpr std::size_t kMaxRangeVa = std::size_t{4} << 30;
// Requests beyond this cannot be rounded without overflow; no device has that much.
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

// The allocator whose growth this thread is in: its driver calls may fail and call back
// (a tracer's callback asking for ReleaseIdle) while it holds its own lock.
thread_local const void* t_growing = nullptr;
class GrowingScope {
 public:
  explicit GrowingScope(const void* allocator) : previous_(t_growing) { t_growing = allocator; }
  ~GrowingScope() { t_growing = previous_; }
  GrowingScope(const GrowingScope&) = delete;
  GrowingScope& operator=(const GrowingScope&) = delete;

 private:
  const void* previous_;
};

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

Stat MakeStat(std::uint64_t current, std::uint64_t peak, std::uint64_t allocated,
              std::uint64_t freed) {
  return {static_cast<std::int64_t>(current),
          static_cast<std::int64_t>(std::max(peak, current)),
          static_cast<std::int64_t>(allocated), static_cast<std::int64_t>(freed)};
}

// `s` less the cumulative figures of `base` (ResetAccumulated).
void SubtractAccumulated(DetailedStats& s, const DetailedStats& base) {
  ForEachStatField(s, base, [](auto& a, const auto& b) {
    if constexpr (std::is_same_v<std::decay_t<decltype(a)>, std::int64_t>) {
      a -= b;
    } else {
      for (int k = 0; k < 3; ++k) {
        a[k].allocated -= b[k].allocated;
        a[k].freed -= b[k].freed;
      }
    }
  });
}

class CachingAllocator final : public DeviceAllocator, private ThreadCacheOwner {
 public:
  CachingAllocator(Backend& backend, CachingAllocatorOptions options)
      : backend_(backend),
        options_(options),
        pages_(backend, options.device, options.observer),
        guard_(backend),
        id_(ThreadCaches::NewOwnerId()),
        block_events_(options.observer != nullptr && options.observer->wants_block_events()),
        // An observer of blocks is told of every alloc and free in the order they happen,
        // under the lock (the trace is replayed in that order): then every call takes it.
        cache_on_(options.thread_cache && !block_events_),
        limits_{options.thread_cache_bin_entries, options.thread_cache_bytes},
        caching_(cache_on_ && options.thread_cache_single_thread) {
    options_.small_limit = std::min(options_.small_limit, kSmallLimit);
    if (options_.range_va_bytes == 0) {
      options_.range_va_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(
          RoundUp(backend.capacity(), backend.granularity()), kMaxRangeVa));
    }
    live_.reserve(1024);
  }

  ~CachingAllocator() override {
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
  }

  std::string_view name() const override { return "gpumem"; }

  absl::StatusOr<DevicePtr> Allocate(std::size_t bytes, StreamId stream) override {
    ThreadCache* c = nullptr;
    if (Caching() && bytes <= kMaxRequest) {
      c = MyCache(/*create=*/true);
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
    }
    return AllocateLocked(bytes, stream, c, kDefaultPool);
  }

  void Free(DevicePtr ptr) override { FreeIfOwned(ptr); }

  bool FreeIfOwned(DevicePtr ptr) override {
    if (caching_.load(std::memory_order_relaxed)) {
      if (ThreadCache* c = ThreadCaches::Find(id_)) {
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
        if (live.heap != nullptr) {  // freed, but the cache is full: back to the pool
          std::lock_guard lock(mu_);
          ReleaseBlock(ptr, live);
          return true;
        }
      }
    }
    return FreeLocked(ptr);
  }

  bool Owns(DevicePtr ptr) const override {
    std::lock_guard lock(mu_);
    if (auto it = live_.find(ptr); it != live_.end()) return !it->second.pending;
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      std::lock_guard cl(c->mu());
      const LiveBlock* r = c->FindRecord(ptr);
      if (r != nullptr) return !r->cached;
    }
    return false;
  }

  // Pool blocks are allocated on the locked path and never recorded in a thread cache:
  // their free finds them in live_ and takes the lock too, so they go back to their pool.
  absl::StatusOr<DevicePtr> AllocateInPool(std::size_t bytes, StreamId stream,
                                           PoolId pool) override {
    if (pool == kDefaultPool) return Allocate(bytes, stream);
    return AllocateLocked(bytes, stream, nullptr, pool);
  }

  // Pool blocks are all carved from the large pool (see AllocateLocked), so any of them
  // can be put back where it was.
  absl::StatusOr<DevicePtr> AllocateAt(DevicePtr addr, std::size_t bytes, StreamId stream,
                                       PoolId pool) override {
    std::unique_lock lock(mu_);
    if (pool == kDefaultPool) return absl::InvalidArgumentError("AllocateAt: not a pool");
    auto it = heaps_.find(std::make_pair(pool, stream));
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

  void BeginCapture() override {
    std::lock_guard lock(mu_);
    ++capture_depth_;
  }

  void EndCapture() override {
    std::lock_guard lock(mu_);
    if (capture_depth_ == 0 || --capture_depth_ > 0) return;
    for (DeferredFree& d : capture_deferred_) guard_.Defer(d.ptr, d.streams);
    capture_deferred_.clear();
    ReleaseDonePools();
  }

  void ReleasePool(PoolId pool) override {
    std::lock_guard lock(mu_);
    auto it = pools_.find(pool);
    if (it == pools_.end()) return;
    it->second.released = true;
    if (it->second.live == 0) pool_done_ = true;
    ReleaseDonePools();
  }

  void EmptyPoolCache(PoolId pool) override {
    std::lock_guard lock(mu_);
    if (Capturing()) return;
    pages_.BeginSlowPath();
    ReleaseCachedOf([pool](const StreamHeap& h) { return h.pool == pool; });
  }

  std::vector<DevicePtr> PoolLiveBlocks(PoolId pool) const override {
    std::lock_guard lock(mu_);
    std::vector<DevicePtr> out;
    auto add = [&](DevicePtr p, const LiveBlock& live) {
      if (!live.pending && live.heap->pool == pool) out.push_back(p);
    };
    for (const auto& [p, live] : live_) add(p, live);
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      std::lock_guard cl(c->mu());
      c->ForEachLive(add);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  bool RecordStream(DevicePtr ptr, StreamId stream) override {
    std::lock_guard lock(mu_);
    StreamId own;
    if (auto it = live_.find(ptr); it != live_.end()) {
      if (it->second.pending) return false;
      own = it->second.stream;
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

  // A no-op while a capture is under way: releasing memory would break it.
  void EmptyCache() override {
    std::lock_guard lock(mu_);
    GiveBackIdle();
  }

  void ReleaseIdle() override {
    if (t_growing == this) return;  // our own driver call failed: the slow path handles it
    EmptyCache();
  }

  AllocatorStats stats() const override {
    std::lock_guard lock(mu_);
    AllocatorStats s = stats_;
    {
      // Every cache held at once: the counts and bytes are one consistent snapshot.
      LockedCaches caches(caches_);
      const AllocTally t = TotalTally();
      s.alloc_count = t.alloc_count;
      s.free_count = t.free_count;
      for (const std::shared_ptr<ThreadCache>& c : caches_) {
        s.thread_cached_bytes += c->cached_bytes();
      }
      s.allocated_bytes = LiveCachesHeld().bytes;
      s.peak_allocated_bytes = bytes_.max();
    }
    s.active_blocks = s.alloc_count - s.free_count;
    s.reserved_bytes = pages_.reserved_bytes();
    s.peak_reserved_bytes = std::max(s.peak_reserved_bytes, s.reserved_bytes);
    s.largest_free_bytes = LargestFree();
    return s;
  }

  void ResetPeaks() override {
    std::lock_guard lock(mu_);
    {
      LockedCaches caches(caches_);
      const Rest live = FoldCredits();
      bytes_.peak.store(live.bytes, std::memory_order_relaxed);
      count_.peak.store(live.count, std::memory_order_relaxed);
      const AllocTally t = TotalTally();
      for (int k = 0; k < 3; ++k) kind_peaks_[k] = Figures(t, k);
    }
    stats_.peak_reserved_bytes = pages_.reserved_bytes();
    reserved_peaks_ = {};
    segment_peaks_ = {};
    SampleReserved();
  }

  DetailedStats detailed_stats() const override {
    std::lock_guard lock(mu_);
    DetailedStats s = RawDetailedStats();
    SubtractAccumulated(s, accumulated_base_);
    return s;
  }

  void ResetAccumulated() override {
    std::lock_guard lock(mu_);
    accumulated_base_ = RawDetailedStats();
  }

  std::vector<LayoutSegment> Layout() const override {
    std::lock_guard lock(mu_);
    LockedCaches caches(caches_);
    std::vector<LayoutSegment> out;
    for (const auto& [key, h] : heaps_) AppendLayout(*h, &out);
    std::sort(out.begin(), out.end(), [](const LayoutSegment& a, const LayoutSegment& b) {
      return a.address < b.address;
    });
    return out;
  }

  OomReport last_oom() const override {
    std::lock_guard lock(mu_);
    return last_oom_;
  }

 private:
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

  // Whether calls go through thread caches (set under mu_: see AddAlone).
  bool Caching() const { return caching_.load(std::memory_order_relaxed); }

  // Whether mu_ is held by someone right now: a look at glibc's lock word, one load of the
  // line the lock is about to take anyway. try_lock would tell the same at ~4 ns more per
  // call (a glibc function call; allocator_bench's single-threaded small pair 53 -> 50 ns).
  bool LockLooksHeld() {
#if defined(__GLIBC__)
    return __atomic_load_n(&mu_.native_handle()->__data.__lock, __ATOMIC_RELAXED) != 0;
#else
    if (!mu_.try_lock()) return true;
    mu_.unlock();
    return false;
#endif
  }

  // The lock of the locked paths, noting contention: caches start once threads keep
  // meeting at the lock (CachingAllocatorOptions::thread_cache_single_thread).
  std::unique_lock<std::mutex> LockNotingContention() {
    const bool held = LockLooksHeld();
    std::unique_lock lock(mu_);
    if (held) ++contended_calls_;
    if (cache_on_ && ++locked_calls_ >= options_.thread_cache_lock_window) {
      if (contended_calls_ >= options_.thread_cache_contended_calls) {
        caching_.store(true, std::memory_order_relaxed);
      }
      locked_calls_ = 0;
      contended_calls_ = 0;
    }
    return lock;
  }

  // Accounting, exact without a shared write per cached pair. Two shared totals, bytes_
  // and count_ (live blocks), work alike; for bytes: bytes_.g (G) is the shared total minus
  // nothing: a block freed through a cache adds its bytes to that cache's credit instead
  // of subtracting them from G, so the true total is A = G - (every cache's credit), and
  // G >= A. Invariant: the peak (P) >= G, and P is only ever set to a true total. An
  // allocation first spends its cache's credit (A rises, G does not, so A <= G <= P: no
  // new peak missed); the rest is added to G only while G stays <= P (compare-and-swap);
  // otherwise AddSlow folds every credit into G (G = A) under every lock, adds, and raises
  // P to the exact total. A thread reusing what it freed thus touches nothing shared.
  // While blocks wait for other streams (pending), active = live + pending can peak
  // without the live total doing so: then every allocation takes AddSlow (pending_any_).

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
  // mu_ held, no cache's lock.
  void AddSlow(Rest rest) {
    LockedCaches caches(caches_);
    const Rest live = FoldCredits();
    const bool raised = bytes_.Set(live.bytes + rest.bytes);
    count_.Set(live.count + rest.count);
    if (raised || pending_count_ != 0) SamplePeaks(TotalTally());
  }
  // mu_ and every cache's lock held: G = A, no credit left; returns the totals.
  Rest FoldCredits() {
    const Rest live = LiveCachesHeld();
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      c->credit = 0;
      c->count_credit = 0;
    }
    bytes_.g.store(live.bytes, std::memory_order_relaxed);
    count_.g.store(live.count, std::memory_order_relaxed);
    return live;
  }
  // The exact totals: mu_ held, no cache's lock.
  Rest ExactLive() const {
    LockedCaches caches(caches_);
    return LiveCachesHeld();
  }
  // The same with mu_ and every cache's lock held.
  Rest LiveCachesHeld() const {
    Rest live{bytes_.get(), count_.get()};
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      live.bytes -= c->credit;
      live.count -= c->count_credit;
    }
    return live;
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
    if (caching_.load(std::memory_order_relaxed)) {
      bytes_.g.fetch_sub(bytes, std::memory_order_relaxed);
      count_.g.fetch_sub(1, std::memory_order_relaxed);
    } else {
      bytes_.g.store(bytes_.get() - bytes, std::memory_order_relaxed);
      count_.g.store(count_.get() - 1, std::memory_order_relaxed);
    }
  }

  // Every allocation and free so far: mu_ and every cache's lock held.
  AllocTally TotalTally() const {
    AllocTally t = tally_;
    for (const std::shared_ptr<ThreadCache>& c : caches_) t += c->tally;
    return t;
  }
  // Live and active blocks of kind `k` (DetailedStats::Kind) from the exact tally `t`.
  KindFigures Figures(const AllocTally& t, int k) const {
    KindFigures f;
    const std::uint64_t small = t.small_alloc_count - t.small_free_count;
    const std::uint64_t small_bytes = t.small_alloc_bytes - t.small_free_bytes;
    f.count = t.alloc_count - t.free_count;
    f.bytes = t.alloc_bytes - t.free_bytes;
    f.active_count = pending_count_;
    f.active_bytes = pending_bytes_;
    if (k == DetailedStats::kSmall) {
      f.count = small;
      f.bytes = small_bytes;
      f.active_count = pending_small_count_;
      f.active_bytes = pending_small_bytes_;
    } else if (k == DetailedStats::kLarge) {
      f.count -= small;
      f.bytes -= small_bytes;
      f.active_count -= pending_small_count_;
      f.active_bytes -= pending_small_bytes_;
    }
    f.active_count += f.count;
    f.active_bytes += f.bytes;
    return f;
  }
  // Raises the sampled peaks to the figures now (mu_ held, `t` exact).
  void SamplePeaks(const AllocTally& t) {
    for (int k = 0; k < 3; ++k) kind_peaks_[k].Raise(Figures(t, k));
  }

  // Blocks begin to wait for other streams: from now until none does, allocations take
  // AddSlow. Cached paths in flight finish first (every cache's lock is taken).
  void BeginPending() {
    LockedCaches caches(caches_);
    pending_any_.store(true, std::memory_order_relaxed);
  }
  void AddPending(const LiveBlock& live) {
    if (pending_count_ == 0) BeginPending();
    ++pending_count_;
    pending_bytes_ += live.requested;
    if (live.size_class >= 0) {
      ++pending_small_count_;
      pending_small_bytes_ += live.requested;
    }
  }
  void SubPending(const LiveBlock& live) {
    --pending_count_;
    pending_bytes_ -= live.requested;
    if (live.size_class >= 0) {
      --pending_small_count_;
      pending_small_bytes_ -= live.requested;
    }
    if (pending_count_ == 0) pending_any_.store(false, std::memory_order_relaxed);
  }

  // Raises the peaks of reserved bytes and segments to the figures now (mu_ held).
  void SampleReserved() {
    const std::uint64_t reserved = pages_.reserved_bytes();
    const std::uint64_t slab_bytes = slab_bytes_added_ - slab_bytes_removed_;
    const std::uint64_t slabs = slabs_added_ - slabs_removed_;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, reserved);
    RaisePeaks(reserved_peaks_, {reserved, slab_bytes, reserved - slab_bytes});
    RaisePeaks(segment_peaks_, {pages_.ranges() + slabs, slabs, pages_.ranges()});
  }
  using KindPeaks = std::array<std::uint64_t, 3>;
  static void RaisePeaks(KindPeaks& peaks, const KindPeaks& now) {
    for (int k = 0; k < 3; ++k) peaks[k] = std::max(peaks[k], now[k]);
  }

  // detailed_stats() with cumulative figures since the allocator started; mu_ held.
  DetailedStats RawDetailedStats() const {
    DetailedStats s;
    LockedCaches caches(caches_);
    const AllocTally t = TotalTally();
    const std::uint64_t peak_bytes = bytes_.max();
    const std::uint64_t peak_count = count_.max();
    FillBlockStats(s, t, peak_bytes, peak_count);
    FillReservedStats(s);
    s.num_alloc_retries = static_cast<std::int64_t>(retries_);
    s.num_ooms = static_cast<std::int64_t>(stats_.oom_count);
    const BackendCounters bc = backend_.counters();
    s.num_device_alloc = static_cast<std::int64_t>(bc.physical_creates + bc.segment_allocs);
    s.num_device_free = static_cast<std::int64_t>(bc.physical_releases + bc.segment_frees);
    return s;
  }
  // allocation, active and the bytes of both; every lock held.
  void FillBlockStats(DetailedStats& s, const AllocTally& t, std::uint64_t peak_bytes,
                      std::uint64_t peak_count) const {
    const std::uint64_t allocs[3] = {t.alloc_count, t.small_alloc_count,
                                     t.alloc_count - t.small_alloc_count};
    const std::uint64_t frees[3] = {t.free_count, t.small_free_count,
                                    t.free_count - t.small_free_count};
    const std::uint64_t alloc_bytes[3] = {t.alloc_bytes, t.small_alloc_bytes,
                                          t.alloc_bytes - t.small_alloc_bytes};
    const std::uint64_t free_bytes[3] = {t.free_bytes, t.small_free_bytes,
                                         t.free_bytes - t.small_free_bytes};
    for (int k = 0; k < 3; ++k) {
      const KindFigures now = Figures(t, k);
      KindFigures peak = kind_peaks_[k];
      peak.Raise(now);
      if (k == DetailedStats::kAll) {
        // The live totals' peaks are exact; while nothing is pending, active is live.
        peak.count = peak_count;
        peak.bytes = peak_bytes;
        peak.active_count = std::max(peak.active_count, peak_count);
        peak.active_bytes = std::max(peak.active_bytes, peak_bytes);
      }
      // A block stops being active when its free completes (pending ones are still).
      const std::uint64_t pending = now.active_count - now.count;
      const std::uint64_t pending_bytes = now.active_bytes - now.bytes;
      s.allocation[k] = MakeStat(now.count, peak.count, allocs[k], frees[k]);
      s.allocated_bytes[k] = MakeStat(now.bytes, peak.bytes, alloc_bytes[k], free_bytes[k]);
      s.requested_bytes[k] = s.allocated_bytes[k];
      s.active[k] = MakeStat(now.active_count, peak.active_count, allocs[k], frees[k] - pending);
      s.active_bytes[k] = MakeStat(now.active_bytes, peak.active_bytes, alloc_bytes[k],
                                   free_bytes[k] - pending_bytes);
    }
  }
  // reserved_bytes and segment; mu_ held.
  void FillReservedStats(DetailedStats& s) const {
    const std::uint64_t created = pages_.created_bytes();
    const std::uint64_t released = pages_.released_bytes();
    const std::uint64_t reserved = pages_.reserved_bytes();
    const std::uint64_t slab_bytes = slab_bytes_added_ - slab_bytes_removed_;
    s.reserved_bytes[0] = MakeStat(reserved, reserved_peaks_[0], created, released);
    s.reserved_bytes[1] =
        MakeStat(slab_bytes, reserved_peaks_[1], slab_bytes_added_, slab_bytes_removed_);
    // Large memory is what is not in slabs: slabs carved from it leave it, freed ones return.
    s.reserved_bytes[2] = MakeStat(reserved - slab_bytes, reserved_peaks_[2],
                                   created + slab_bytes_removed_, released + slab_bytes_added_);
    const std::uint64_t ranges = pages_.ranges();
    const std::uint64_t slabs = slabs_added_ - slabs_removed_;
    s.segment[0] = MakeStat(ranges + slabs, segment_peaks_[0],
                            pages_.ranges_created() + slabs_added_,
                            pages_.ranges_released() + slabs_removed_);
    s.segment[1] = MakeStat(slabs, segment_peaks_[1], slabs_added_, slabs_removed_);
    s.segment[2] = MakeStat(ranges, segment_peaks_[2], pages_.ranges_created(),
                            pages_.ranges_released());
  }

  // This thread's cache; with `create`, made and registered on first use.
  ThreadCache* MyCache(bool create) {
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

  // Thread exit: the cache's blocks go back to the pools, its records to live_.
  void DetachThreadCache(ThreadCache* c) override {
    std::lock_guard lock(mu_);
    std::lock_guard cl(c->mu());
    c->Drain([this](DevicePtr p, const LiveBlock& live) { ReleaseBlock(p, live); });
    c->TakeAllLive([this](DevicePtr p, const LiveBlock& live) { live_.emplace(p, live); });
    tally_ += c->tally;
    bytes_.g.fetch_sub(c->credit, std::memory_order_relaxed);
    count_.g.fetch_sub(c->count_credit, std::memory_order_relaxed);
    c->credit = 0;
    c->count_credit = 0;
    c->tally = {};
    c->Detach();
    std::erase_if(caches_, [c](const std::shared_ptr<ThreadCache>& p) { return p.get() == c; });
  }

  // Every thread's cached blocks back to the pools; whether there were any. mu_ held.
  // `large_only`: the large ones, for a large block that did not fit (see AllocateSlow).
  bool FlushCaches(bool large_only = false) {
    bool any = false;
    auto release = [this](DevicePtr p, const LiveBlock& live) { ReleaseBlock(p, live); };
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      std::lock_guard cl(c->mu());
      any |= large_only ? c->DrainLargeUnderPressure(release) : c->Drain(release);
    }
    return any;
  }

  // A live block recorded in some thread's cache, taken out of it; mu_ held.
  bool TakeFromCaches(DevicePtr ptr, LiveBlock* out) {
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      std::lock_guard cl(c->mu());
      if (c->Take(ptr, out)) return true;
    }
    return false;
  }

  // RecordStream of a block recorded in a cache: its free must take the lock.
  bool RecordInCaches(DevicePtr ptr, StreamId stream, StreamId* own) {
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

  absl::StatusOr<DevicePtr> AllocateLocked(std::size_t bytes, StreamId stream, ThreadCache* c,
                                           PoolId pool) {
    std::unique_lock lock = LockNotingContention();
    if (bytes > kMaxRequest) return Oom(bytes, stream);
    if (!guard_.empty() && !Capturing()) CollectPending();
    ReleaseDonePools();
    if (pool != kDefaultPool) pools_[pool].released = false;  // in use (again)
    StreamHeap* h = Heap(stream, pool);
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
        Block* b = AllocateLarge(*h, SizeClasses::SlabBytes(k));
        if (b == nullptr) return Oom(bytes, stream);
        AddSlab(*h, k, b);
        ptr = h->small.Allocate(k, &live.slab);
      }
    } else {
      // This thread's cached large blocks go back before best fit: it would have picked
      // among them without the cache, and a smaller free block than the fit it needs split
      // for it fragments the layout (replays with caches on: more maps in steady steps).
      if (c != nullptr) {
        std::lock_guard cl(c->mu());
        c->DrainLargeBlocks([this](DevicePtr p, const LiveBlock& l) { ReleaseBlock(p, l); });
      }
      Block* b = AllocateLarge(*h, RoundUp(bytes, kBlockAlign));
      if (b == nullptr) return Oom(bytes, stream);
      live.block = b;
      live.bin = b->size;
      ptr = b->addr;
    }
    if (pool != kDefaultPool) ++pools_[pool].live;
    // Asked once: the answer decides both this event and, later, the free's.
    live.unseen = !ObservesAllocation();
    Account(ptr, live, c);
    if (!live.unseen) Notify(AllocatorEventKind::kAlloc, ptr, bytes, stream);
    return ptr;
  }

  // Records a block just handed out and adds it to the totals; mu_ held.
  void Account(DevicePtr ptr, const LiveBlock& live, ThreadCache* c) {
    const bool small = live.size_class >= 0;
    Rest rest;
    if (c != nullptr) {
      std::lock_guard cl(c->mu());
      c->Record(ptr, live);
      c->tally.OnAlloc(live.requested, small);
      rest = AddFast(c, live.requested);
    } else {
      live_.emplace(ptr, live);
      tally_.OnAlloc(live.requested, small);
      if (caching_.load(std::memory_order_relaxed)) {
        rest = AddFast(nullptr, live.requested);
      } else {
        AddAlone(live.requested);
      }
    }
    if (rest.any()) AddSlow(rest);
  }

  void AddSlab(StreamHeap& h, int k, Block* b) {
    h.small.AddSlab(k, b);
    slab_bytes_added_ += b->size;
    ++slabs_added_;
    SampleReserved();
  }

  bool FreeLocked(DevicePtr ptr) {
    std::unique_lock lock = LockNotingContention();
    LiveBlock live;
    if (auto it = live_.find(ptr); it != live_.end()) {
      if (it->second.pending) return false;  // freed already
      live = it->second;
      live_.erase(it);
    } else if (!TakeFromCaches(ptr, &live)) {
      return false;  // not ours, or freed already
    }
    auto u = used_on_.empty() ? used_on_.end() : used_on_.find(ptr);
    const bool wait = u != used_on_.end();
    if (wait) AddPending(live);  // before the live total falls: see AddFast
    SubLiveLocked(live.requested);
    tally_.OnFree(live.requested, live.size_class >= 0);
    if (!live.unseen) Notify(AllocatorEventKind::kFree, ptr, live.requested, live.stream);
    if (wait) {
      live.pending = true;
      live_.emplace(ptr, live);
      DeferFree(ptr, std::move(u->second));
      used_on_.erase(u);
      return true;
    }
    ReleaseBlock(ptr, live);
    ReleaseDonePools();
    return true;
  }

  // Holds a freed block until work queued on `streams` has run. A capture records no
  // event that the allocator would query: the events are recorded when it ends.
  void DeferFree(DevicePtr ptr, std::vector<StreamId> streams) {
    if (Capturing()) {
      capture_deferred_.push_back({ptr, std::move(streams)});
    } else {
      guard_.Defer(ptr, streams);
    }
  }

  bool Capturing() const { return capture_depth_ > 0; }

  StreamHeap* Heap(StreamId stream, PoolId pool) {
    if (last_heap_ != nullptr && last_heap_->stream == stream && last_heap_->pool == pool) {
      return last_heap_;
    }
    std::unique_ptr<StreamHeap>& h = heaps_[{pool, stream}];
    if (h == nullptr) {
      h = std::make_unique<StreamHeap>(pages_, options_.range_va_bytes, stream, pool);
    }
    last_heap_ = h.get();
    return last_heap_;
  }

  void ReleaseBlock(DevicePtr ptr, const LiveBlock& live) {
    if (live.slab != nullptr) {
      live.heap->small.Free(live.slab, ptr);
    } else {
      live.heap->large.Free(live.block);
    }
    if (live.heap->pool != kDefaultPool) PoolBlockReleased(live.heap->pool);
  }

  void PoolBlockReleased(PoolId pool) {
    PoolState& p = pools_[pool];
    if (--p.live == 0 && p.released) pool_done_ = true;
  }

  // Returns the memory of released pools whose last block is gone (mu_ held). Not during
  // a capture: it unmaps.
  void ReleaseDonePools() {
    if (!pool_done_ || Capturing()) return;
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

  // Every heap of `pool` unmapped and its ranges released (no block of it is in use).
  void DestroyPoolHeaps(PoolId pool) {
    last_heap_ = nullptr;
    absl::erase_if(heaps_, [&](const auto& entry) {
      const StreamHeap& h = *entry.second;
      if (h.pool != pool) return false;
      slab_bytes_removed_ += h.small.bytes();
      slabs_removed_ += h.small.slab_count();
      return true;
    });
  }

  // Whether trims and EmptyCache may release the heap's free memory: not a pool in use.
  bool Reclaimable(const StreamHeap& h) const {
    if (h.pool == kDefaultPool) return true;
    auto it = pools_.find(h.pool);
    return it == pools_.end() || it->second.released;
  }

  void CollectPending() {
    guard_.Collect([this](DevicePtr ptr) {
      auto it = live_.find(ptr);
      SubPending(it->second);
      ReleaseBlock(ptr, it->second);
      live_.erase(it);
    });
  }

  // Unmaps the old addresses of lent pages whose work is done (all, once quiet).
  void RetireLent() {
    for (auto& [key, h] : heaps_) {
      if (h->large.lent_pages() > 0) h->large.RetireLent(/*all=*/pages_.quiet());
    }
  }

  std::size_t EmptySlabBytes() const {
    std::size_t n = 0;
    for (const auto& [key, h] : heaps_) n += h->small.empty_bytes();
    return n;
  }

  void ReleaseEmptySlabs() {
    for (auto& [key, h] : heaps_) ReleaseEmptySlabs(*h);
  }
  // Empty slabs back to their heap's large pool (its memory stays in the heap's pool).
  void ReleaseEmptySlabs(StreamHeap& h) {
    LargePool& large = h.large;
    h.small.ReleaseEmpty([&](Block* b) {
      slab_bytes_removed_ += b->size;
      ++slabs_removed_;
      large.Free(b);
    });
  }

  Block* AllocateLarge(StreamHeap& h, std::size_t bytes) {
    if (Block* b = h.large.BestFit(bytes)) return b;
    GrowingScope growing(this);
    Block* b = CannotFit(bytes)    ? nullptr
               : Capturing()       ? AllocateCapturing(h, bytes)
                                   : AllocateSlow(h, bytes);
    SampleReserved();
    return b;
  }

  // Whether `bytes` more cannot fit even with every idle byte reclaimed: live and
  // pending blocks pin their bytes at least. Such a request fails before any page is
  // created, mapped or unmapped.
  bool CannotFit(std::size_t bytes) const {
    const std::uint64_t capacity = backend_.capacity();
    const std::uint64_t pinned = ExactLive().bytes + pending_bytes_;
    return bytes > capacity || pinned > capacity - bytes;
  }

  // A capture is under way: free blocks and new pages only. Nothing is unmapped, waited
  // for or released, so a request that does not fit fails (OOM) without trimming.
  Block* AllocateCapturing(StreamHeap& h, std::size_t bytes) {
    FlushCaches();
    ReleaseEmptySlabs(h);
    if (Block* b = h.large.BestFit(bytes)) return b;
    absl::StatusOr<Block*> grown = Grow(h, bytes, /*budget=*/true);
    return grown.ok() ? *grown : nullptr;
  }

  // No free block fits. In order: take back what pending frees and empty slabs hold, grow
  // from idle and new pages; if the device is full, wait for all queued work and retry;
  // then release every cached byte and retry once more.
  Block* AllocateSlow(StreamHeap& h, std::size_t bytes) {
    pages_.BeginSlowPath();
    // Blocks in thread caches first, so growth sees all the free memory it would without
    // them: the large ones (cached small blocks hold slab slots, which rarely make room),
    // then, before anything grows, every one.
    if (FlushCaches(/*large_only=*/true)) {
      if (Block* b = h.large.BestFit(bytes)) return b;
    }
    FlushCaches();
    const std::uint64_t stitches = stats_.stitch_count;
    Block* b = nullptr;
    int attempt = 0;
    for (; attempt < 3 && b == nullptr; ++attempt) b = AttemptGrowth(h, bytes, attempt);
    if (attempt > 1 || stats_.stitch_count != stitches) ++retries_;
    return b;
  }

  // One round of AllocateSlow: the later ones wait for the device, stitch whatever the
  // budget says and, after the second, trim every cached byte.
  Block* AttemptGrowth(StreamHeap& h, std::size_t bytes, int attempt) {
    if (attempt > 0) pages_.Quiesce();  // every pending event has now completed
    CollectPending();
    RetireLent();
    if (attempt > 0 || EmptySlabBytes() > options_.slab_cache_bytes) ReleaseEmptySlabs();
    if (Block* b = h.large.BestFit(bytes)) return b;
    if (attempt == 0 && EatsHeadroom(h, bytes)) return GrowFromIdle(h, bytes);
    absl::StatusOr<Block*> grown = Grow(h, bytes, /*budget=*/attempt == 0);
    if (grown.ok()) return *grown;
    if (attempt == 1) {
      ReleaseAllCached();
      ++stats_.trim_count;
    }
    return nullptr;
  }

  // Whether growth for `bytes` would create memory that leaves the driver less free than
  // the headroom (CachingAllocatorOptions::headroom_bytes). The one free-memory query.
  bool EatsHeadroom(StreamHeap& h, std::size_t bytes) const {
    if (options_.headroom_bytes == 0) return false;
    const std::uint64_t created = NewBytesFor(h, bytes);
    if (created == 0) return false;
    const std::uint64_t free = backend_.DeviceFreeBytes();
    return free < created || free - created < options_.headroom_bytes;
  }

  // At most the memory growth for `bytes` creates: the pages that the page cache lacks,
  // or a segment.
  std::uint64_t NewBytesFor(const StreamHeap& h, std::size_t bytes) const {
    if (!pages_.vmm()) return bytes;
    const std::size_t need = h.large.PlanGrowth(bytes).pages();
    const std::size_t cached = pages_.cached_pages();
    return need > cached ? (need - cached) * pages_.page_bytes() : 0;
  }

  // Growth that keeps the headroom where it can: every idle page goes to the page cache,
  // growth maps from there first, and the idle pages it leaves go back to the device.
  Block* GrowFromIdle(StreamHeap& h, std::size_t bytes) {
    ++stats_.trim_count;
    CollectIdleOf([this](const StreamHeap& heap) { return Reclaimable(heap); });
    Block* b = h.large.BestFit(bytes);
    if (b == nullptr) {
      absl::StatusOr<Block*> grown = Grow(h, bytes, /*budget=*/false);
      if (grown.ok()) b = *grown;
    }
    pages_.ReleaseCached();
    return b;
  }

  // `budget`: new pages are preferred to stitching within the growth budget. Off on the
  // retries: the device refused pages, so idle ones are stitched before anything is trimmed.
  absl::StatusOr<Block*> Grow(StreamHeap& h, std::size_t bytes, bool budget) {
    if (!pages_.vmm()) return h.large.Grow({}, bytes);
    const LargePool::Plan plan = h.large.PlanGrowth(bytes);
    const std::size_t need = plan.pages();
    std::size_t reused = pages_.cached_pages();
    bool lent = false;
    // No stitching during a capture: it would unmap (or lend, recording an event).
    if (options_.stitch && !Capturing() && need > pages_.cached_pages() &&
        !(budget && NewPagesFit(need - pages_.cached_pages(), bytes))) {
      const std::size_t want = need - pages_.cached_pages();
      // This stream's own idle pages are lent: the new block's work follows theirs in
      // stream order, so nothing waits. Other streams' pages need the device idle.
      std::size_t taken = h.large.TakeIdlePages(want, plan.extent, /*lend=*/true);
      lent = taken > 0;
      // Another pool's pages are never taken, nor are this pool's given to another.
      for (auto& [key, other] : heaps_) {
        if (taken == want) break;
        if (other.get() != &h && other->pool == h.pool) {
          taken += other->large.TakeIdlePages(want - taken, nullptr);
        }
      }
      reused += taken;
      stitched_bytes_ += taken * pages_.page_bytes();
    }
    absl::StatusOr<Block*> b = h.large.Grow(plan, bytes);
    if (b.ok() && reused > 0) ++stats_.stitch_count;
    // Lent pages left in the cache could go to another stream's growth: make them safe.
    if (lent && !b.ok()) pages_.Quiesce();
    return b;
  }

  // Whether `pages` new pages keep reserved within the budget for growth without
  // stitching (CachingAllocatorOptions::new_page_headroom), counting the request of
  // `bytes` being served in the peak.
  bool NewPagesFit(std::size_t pages, std::size_t bytes) const {
    const double peak = static_cast<double>(
        std::max<std::uint64_t>(bytes_.max(), ExactLive().bytes + bytes));
    const double after =
        static_cast<double>(pages_.reserved_bytes() + pages * pages_.page_bytes());
    const double learned = peak * (1.0 + options_.new_page_headroom) +
                           static_cast<double>(stitched_bytes_);
    const double budget = std::min(
        learned,
        peak * (1.0 + std::max(options_.max_new_page_headroom, options_.new_page_headroom)));
    return after <= budget && after <= static_cast<double>(backend_.capacity());
  }

  // Every idle page unmapped and released, empty slabs and free segments returned; the
  // memory of pools in use stays.
  void ReleaseAllCached() {
    ReleaseCachedOf([this](const StreamHeap& h) { return Reclaimable(h); });
  }

  // The free memory of the heaps `which` picks released; every cached page too.
  template <typename Which>
  void ReleaseCachedOf(Which which) {
    CollectIdleOf(which);
    pages_.ReleaseCached();
    ReleaseDonePools();
  }

  // Every idle page of the heaps `which` picks into the page cache; their empty slabs and
  // free segments returned.
  template <typename Which>
  void CollectIdleOf(Which which) {
    FlushCaches();
    pages_.Quiesce();
    CollectPending();
    for (auto& [key, h] : heaps_) h->large.RetireLent(/*all=*/true);
    for (auto& [key, h] : heaps_) {
      if (!which(*h)) continue;
      ReleaseEmptySlabs(*h);
      h->large.TakeIdlePages(std::numeric_limits<std::size_t>::max(), nullptr);
      h->large.ReleaseFreeSegments();
    }
  }

  // Every idle byte back to the device (mu_ held); not during a capture, which releasing
  // would break.
  void GiveBackIdle() {
    if (Capturing()) return;
    FlushCaches();
    pages_.BeginSlowPath();
    ReleaseAllCached();
  }

  // Whether any memory could go back: cached or idle pages, empty slabs, free segments.
  bool HoldsIdle() const {
    if (pages_.cached_pages() > 0 || EmptySlabBytes() > 0) return true;
    for (const auto& [key, h] : heaps_) {
      if (h->large.IdlePages() > 0 || (!pages_.vmm() && h->large.largest_free() > 0)) return true;
    }
    return false;
  }

  std::uint64_t LargestFree() const {
    std::uint64_t largest = 0;
    std::uint64_t idle = pages_.cached_pages();
    for (const auto& [key, h] : heaps_) {
      largest = std::max<std::uint64_t>(largest, h->large.largest_free());
      idle += h->large.IdlePages();
    }
    // Idle pages can be stitched into one range of any shape.
    if (pages_.vmm()) largest = std::max<std::uint64_t>(largest, idle * pages_.page_bytes());
    return largest;
  }

  // The record of a block handed out (live, pending, or cached in a thread); null for
  // none. mu_ and every cache's lock held.
  const LiveBlock* FindRecord(DevicePtr ptr) const {
    if (auto it = live_.find(ptr); it != live_.end()) return &it->second;
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      if (const LiveBlock* r = c->FindRecord(ptr)) return r;
    }
    return nullptr;
  }

  // A block at `ptr` of `size` bytes as the layout shows it; false for a lent page's
  // placeholder, which no one uses (its page is counted where it is mapped now).
  bool LayoutBlockAt(DevicePtr ptr, std::size_t size, bool free, LayoutBlock* out) const {
    *out = {.address = ptr, .size = size};
    if (free) return true;
    const LiveBlock* r = FindRecord(ptr);
    if (r == nullptr) return false;
    if (r->cached) return true;  // free, held by a thread's cache
    out->requested = r->requested;
    out->state = r->pending ? LayoutBlock::kPendingFree : LayoutBlock::kAllocated;
    return true;
  }

  static void AddToSegment(LayoutSegment& seg, const LayoutBlock& b) {
    seg.total_size += b.size;
    if (b.state == LayoutBlock::kAllocated) {
      seg.allocated_size += b.size;
      seg.requested_size += b.requested;
    }
    // Neighbouring free slots show as one free block.
    if (b.state == LayoutBlock::kFree && !seg.blocks.empty() &&
        seg.blocks.back().state == LayoutBlock::kFree) {
      seg.blocks.back().size += b.size;
      return;
    }
    seg.blocks.push_back(b);
  }

  // Each maximal run of mapped memory outside slabs (or a segment without VMM) of the
  // heap, and each slab, as segments. mu_ and every cache's lock held.
  void AppendLayout(const StreamHeap& h, std::vector<LayoutSegment>* out) const {
    absl::flat_hash_map<DevicePtr, const Slab*> slabs;
    h.small.ForEachSlab([&](const Slab& s) { slabs.emplace(s.block->addr, &s); });
    LayoutSegment empty;
    empty.stream = h.stream;
    empty.pool = h.pool;
    h.large.ForEachRange([&](const Range&, const std::vector<const Block*>& blocks) {
      std::size_t open = 0;  // the segment the next contiguous block joins, +1; 0: none
      for (const Block* b : blocks) {
        if (auto it = slabs.find(b->addr); it != slabs.end() && !b->free) {
          out->push_back(SlabSegment(*it->second, empty));
          open = 0;
          continue;
        }
        LayoutBlock lb;
        if (!LayoutBlockAt(b->addr, b->size, b->free, &lb)) {
          open = 0;
          continue;
        }
        if (open == 0 || (*out)[open - 1].address + (*out)[open - 1].total_size != b->addr) {
          out->push_back(empty);
          out->back().address = b->addr;
          open = out->size();
        }
        AddToSegment((*out)[open - 1], lb);
      }
    });
  }

  LayoutSegment SlabSegment(const Slab& s, const LayoutSegment& empty) const {
    LayoutSegment seg = empty;
    seg.address = s.block->addr;
    seg.is_small = true;
    for (std::uint32_t i = 0; i < s.count; ++i) {
      const DevicePtr p = s.block->addr + i * s.slot_bytes;
      LayoutBlock lb{.address = p, .size = s.slot_bytes};
      if (i < s.fresh) LayoutBlockAt(p, s.slot_bytes, /*free=*/false, &lb);
      AddToSegment(seg, lb);
    }
    const std::size_t tail = s.block->size - s.count * s.slot_bytes;
    if (tail > 0) AddToSegment(seg, {.address = s.block->end() - tail, .size = tail});
    return seg;
  }

  absl::Status Oom(std::size_t bytes, StreamId stream) {
    FlushCaches();  // cached blocks are free memory in the report
    ++stats_.oom_count;
    last_oom_.requested_bytes = bytes;
    last_oom_.allocated_bytes = ExactLive().bytes;
    last_oom_.reserved_bytes = pages_.reserved_bytes();
    last_oom_.largest_free_bytes = LargestFree();
    last_oom_.capacity_bytes = backend_.capacity();
    Notify(AllocatorEventKind::kOom, 0, bytes, stream);
    // Caught or not, an OOM leaves the device full: what no live block uses goes back,
    // so the libraries that allocate next (a cuBLAS handle, an NCCL communicator) find it.
    // Only when something is idle: waiting for the device to fail a request is costly.
    if (HoldsIdle()) GiveBackIdle();
    return absl::ResourceExhaustedError(last_oom_.ToString());
  }

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

  mutable std::mutex mu_;
  Backend& backend_;
  CachingAllocatorOptions options_;
  PageHeap pages_;  // outlives the heaps, which return their pages to it
  StreamGuard guard_;
  // By (pool, stream): a pool's blocks come only from its own heaps.
  absl::flat_hash_map<std::pair<PoolId, StreamId>, std::unique_ptr<StreamHeap>> heaps_;
  StreamHeap* last_heap_ = nullptr;
  // Live blocks not recorded in a thread cache (cache off, pending, or their thread gone).
  absl::flat_hash_map<DevicePtr, LiveBlock> live_;
  absl::flat_hash_map<DevicePtr, std::vector<StreamId>> used_on_;  // RecordStream
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
};

}  // namespace

std::unique_ptr<DeviceAllocator> MakeCachingAllocator(Backend& backend,
                                                      CachingAllocatorOptions options) {
  return std::make_unique<CachingAllocator>(backend, options);
}

}  // namespace gpumem
