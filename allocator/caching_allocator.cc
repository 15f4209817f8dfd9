#include "allocator/caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
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
  StreamHeap(PageHeap& pages, std::size_t range_va, StreamId s)
      : large(pages, range_va, s), stream(s) {}
  LargePool large;  // declared first: slabs live in its blocks, so it goes last
  SmallPool small;
  StreamId stream;
};

namespace {

// Growth room per range. Ranges in the real traces never outgrow 1 GiB (replays are the
// same from 1 to 64 GiB), while up to ~200 ranges are live: 4 GiB keeps the address space
// held (~800 GiB) far from the GPU's limit. A larger request gets a range of its own size.
constexpr std::size_t kMaxRangeVa = std::size_t{4} << 30;
// Requests beyond this cannot be rounded without overflow; no device has that much.
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

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
        std::uint64_t rest = 0;
        {
          std::lock_guard cl(c->mu());
          hit = c->Pop(stream, size_class, small ? 0 : RoundUp(bytes, kBlockAlign), bytes, &ptr);
          if (hit) {
            ++c->alloc_count;
            rest = AddFast(c, bytes);
          }
        }
        if (hit) {
          if (rest != 0) {
            std::lock_guard lock(mu_);
            AddSlow(rest);
          }
          return ptr;
        }
      }
    }
    return AllocateLocked(bytes, stream, c);
  }

  void Free(DevicePtr ptr) override {
    if (caching_.load(std::memory_order_relaxed)) {
      if (ThreadCache* c = ThreadCaches::Find(id_)) {
        LiveBlock live;
        {
          std::lock_guard cl(c->mu());
          LiveBlock* mine = c->FindLive(ptr);
          // A block used on other streams waits for their events: the locked path.
          if (mine != nullptr && !mine->recorded) {
            ++c->free_count;
            c->credit += mine->requested;  // no shared write: see AddFast
            if (c->Free(ptr, mine, &live)) return;
          }
        }
        if (live.heap != nullptr) {  // freed, but the cache is full: back to the pool
          std::lock_guard lock(mu_);
          ReleaseBlock(ptr, live);
          return;
        }
      }
    }
    FreeLocked(ptr);
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

  void EmptyCache() override {
    std::lock_guard lock(mu_);
    FlushCaches();
    pages_.BeginSlowPath();
    ReleaseAllCached();
  }

  AllocatorStats stats() const override {
    std::lock_guard lock(mu_);
    AllocatorStats s = stats_;
    {
      // Every cache held at once: the counts and bytes are one consistent snapshot.
      LockedCaches caches(caches_);
      for (const std::shared_ptr<ThreadCache>& c : caches_) {
        s.alloc_count += c->alloc_count;
        s.free_count += c->free_count;
        s.thread_cached_bytes += c->cached_bytes();
      }
      s.allocated_bytes = AllocatedCachesHeld();
      s.peak_allocated_bytes = peak_allocated_.load(std::memory_order_relaxed);
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
      peak_allocated_.store(FoldCredits(), std::memory_order_relaxed);
    }
    stats_.peak_reserved_bytes = pages_.reserved_bytes();
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

  // Accounting, exact without a shared write per cached pair. allocated_ (G) is the
  // shared total minus nothing: a block freed through a cache adds its bytes to that
  // cache's credit instead of subtracting them from G, so the true total is
  // A = G - (every cache's credit), and G >= A. Invariant: peak_allocated_ (P) >= G, and
  // P is only ever set to a true total. An allocation first spends its cache's credit (A
  // rises, G does not, so A <= G <= P: no new peak missed); the rest is added to G only
  // while G stays <= P (compare-and-swap); otherwise AddSlow folds every credit into G
  // (G = A) under every lock, adds, and raises P to the exact total. A thread reusing what
  // it freed thus touches nothing shared.

  // Adds `bytes` for cache `c` (its lock held; null: no cache, mu_ held). Returns what
  // could not be added without passing the peak: the caller gives it to AddSlow.
  std::uint64_t AddFast(ThreadCache* c, std::uint64_t bytes) {
    if (c != nullptr) {
      const std::uint64_t spent = std::min(c->credit, bytes);
      c->credit -= spent;
      bytes -= spent;
      if (bytes == 0) return 0;
    }
    std::uint64_t g = allocated_.load(std::memory_order_relaxed);
    do {
      if (g + bytes > peak_allocated_.load(std::memory_order_relaxed)) return bytes;
    } while (!allocated_.compare_exchange_weak(g, g + bytes, std::memory_order_relaxed));
    return 0;
  }
  // mu_ held, no cache's lock.
  void AddSlow(std::uint64_t bytes) {
    LockedCaches caches(caches_);
    const std::uint64_t g = FoldCredits() + bytes;
    allocated_.store(g, std::memory_order_relaxed);
    if (g > peak_allocated_.load(std::memory_order_relaxed)) {
      peak_allocated_.store(g, std::memory_order_relaxed);
    }
  }
  // mu_ and every cache's lock held: G = A, no credit left; returns G.
  std::uint64_t FoldCredits() {
    std::uint64_t g = allocated_.load(std::memory_order_relaxed);
    for (const std::shared_ptr<ThreadCache>& c : caches_) {
      g -= c->credit;
      c->credit = 0;
    }
    allocated_.store(g, std::memory_order_relaxed);
    return g;
  }
  // The exact total: mu_ held, no cache's lock.
  std::uint64_t ExactAllocated() const {
    LockedCaches caches(caches_);
    return AllocatedCachesHeld();
  }
  // The same with mu_ and every cache's lock held.
  std::uint64_t AllocatedCachesHeld() const {
    std::uint64_t a = allocated_.load(std::memory_order_relaxed);
    for (const std::shared_ptr<ThreadCache>& c : caches_) a -= c->credit;
    return a;
  }
  // One thread alone (before caching_, which is set under mu_): nothing changes the totals
  // without mu_, so plain stores do (a locked add costs ~10 ns of a ~50 ns pair).
  void AddAlone(std::uint64_t bytes) {
    const std::uint64_t now = allocated_.load(std::memory_order_relaxed) + bytes;
    allocated_.store(now, std::memory_order_relaxed);
    if (now > peak_allocated_.load(std::memory_order_relaxed)) {
      peak_allocated_.store(now, std::memory_order_relaxed);
    }
  }
  // mu_ held. G only falls: P >= G holds.
  void SubAllocatedLocked(std::uint64_t bytes) {
    if (caching_.load(std::memory_order_relaxed)) {
      allocated_.fetch_sub(bytes, std::memory_order_relaxed);
    } else {
      allocated_.store(allocated_.load(std::memory_order_relaxed) - bytes,
                       std::memory_order_relaxed);
    }
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
    stats_.alloc_count += c->alloc_count;
    stats_.free_count += c->free_count;
    allocated_.fetch_sub(c->credit, std::memory_order_relaxed);
    c->credit = 0;
    c->alloc_count = c->free_count = 0;
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

  absl::StatusOr<DevicePtr> AllocateLocked(std::size_t bytes, StreamId stream, ThreadCache* c) {
    std::unique_lock lock = LockNotingContention();
    if (bytes > kMaxRequest) return Oom(bytes, stream);
    if (!guard_.empty()) CollectPending();
    StreamHeap* h = Heap(stream);
    LiveBlock live{.heap = h, .stream = stream, .requested = bytes};
    DevicePtr ptr;
    if (bytes <= options_.small_limit) {
      const int k = SizeClasses::ClassOf(bytes);
      live.bin = SizeClasses::ClassSize(k);
      live.size_class = k;
      ptr = h->small.Allocate(k, &live.slab);
      if (ptr == 0) {
        Block* b = AllocateLarge(*h, SizeClasses::SlabBytes(k));
        if (b == nullptr) return Oom(bytes, stream);
        h->small.AddSlab(k, b);
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
    // Asked once: the answer decides both this event and, later, the free's.
    live.unseen = !ObservesAllocation();
    std::uint64_t rest = 0;
    if (c != nullptr) {
      std::lock_guard cl(c->mu());
      c->Record(ptr, live);
      ++c->alloc_count;
      rest = AddFast(c, bytes);
    } else {
      live_.emplace(ptr, live);
      ++stats_.alloc_count;
      if (caching_.load(std::memory_order_relaxed)) {
        rest = AddFast(nullptr, bytes);
      } else {
        AddAlone(bytes);
      }
    }
    if (rest != 0) AddSlow(rest);
    if (!live.unseen) Notify(AllocatorEventKind::kAlloc, ptr, bytes, stream);
    return ptr;
  }

  void FreeLocked(DevicePtr ptr) {
    std::unique_lock lock = LockNotingContention();
    LiveBlock live;
    if (auto it = live_.find(ptr); it != live_.end()) {
      if (it->second.pending) return;  // freed already
      live = it->second;
      live_.erase(it);
    } else if (!TakeFromCaches(ptr, &live)) {
      return;  // not ours, or freed already
    }
    SubAllocatedLocked(live.requested);
    ++stats_.free_count;
    if (!live.unseen) Notify(AllocatorEventKind::kFree, ptr, live.requested, live.stream);
    if (!used_on_.empty()) {
      auto u = used_on_.find(ptr);
      if (u != used_on_.end()) {
        live.pending = true;
        live_.emplace(ptr, live);
        guard_.Defer(ptr, u->second);
        used_on_.erase(u);
        return;
      }
    }
    ReleaseBlock(ptr, live);
  }

  StreamHeap* Heap(StreamId stream) {
    if (last_heap_ != nullptr && last_heap_->stream == stream) return last_heap_;
    std::unique_ptr<StreamHeap>& h = heaps_[stream];
    if (h == nullptr) h = std::make_unique<StreamHeap>(pages_, options_.range_va_bytes, stream);
    last_heap_ = h.get();
    return last_heap_;
  }

  void ReleaseBlock(DevicePtr ptr, const LiveBlock& live) {
    if (live.slab != nullptr) {
      live.heap->small.Free(live.slab, ptr);
    } else {
      live.heap->large.Free(live.block);
    }
  }

  void CollectPending() {
    guard_.Collect([this](DevicePtr ptr) {
      auto it = live_.find(ptr);
      ReleaseBlock(ptr, it->second);
      live_.erase(it);
    });
  }

  // Unmaps the old addresses of lent pages whose work is done (all, once quiet).
  void RetireLent() {
    for (auto& [stream, h] : heaps_) {
      if (h->large.lent_pages() > 0) h->large.RetireLent(/*all=*/pages_.quiet());
    }
  }

  std::size_t EmptySlabBytes() const {
    std::size_t n = 0;
    for (const auto& [stream, h] : heaps_) n += h->small.empty_bytes();
    return n;
  }

  void ReleaseEmptySlabs() {
    for (auto& [stream, h] : heaps_) {
      LargePool& large = h->large;
      h->small.ReleaseEmpty([&large](Block* b) { large.Free(b); });
    }
  }

  Block* AllocateLarge(StreamHeap& h, std::size_t bytes) {
    if (Block* b = h.large.BestFit(bytes)) return b;
    Block* b = AllocateSlow(h, bytes);
    stats_.peak_reserved_bytes = std::max<std::uint64_t>(stats_.peak_reserved_bytes,
                                                         pages_.reserved_bytes());
    return b;
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
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (attempt > 0) pages_.Quiesce();  // every pending event has now completed
      CollectPending();
      RetireLent();
      if (attempt > 0 || EmptySlabBytes() > options_.slab_cache_bytes) ReleaseEmptySlabs();
      if (Block* b = h.large.BestFit(bytes)) return b;
      absl::StatusOr<Block*> grown = Grow(h, bytes, /*budget=*/attempt == 0);
      if (grown.ok()) return *grown;
      if (attempt == 1) {
        ReleaseAllCached();
        ++stats_.trim_count;
      }
    }
    return nullptr;
  }

  // `budget`: new pages are preferred to stitching within the growth budget. Off on the
  // retries: the device refused pages, so idle ones are stitched before anything is trimmed.
  absl::StatusOr<Block*> Grow(StreamHeap& h, std::size_t bytes, bool budget) {
    if (!pages_.vmm()) return h.large.Grow({}, bytes);
    const LargePool::Plan plan = h.large.PlanGrowth(bytes);
    const std::size_t need = plan.pages();
    std::size_t reused = pages_.cached_pages();
    bool lent = false;
    if (options_.stitch && need > pages_.cached_pages() &&
        !(budget && NewPagesFit(need - pages_.cached_pages(), bytes))) {
      const std::size_t want = need - pages_.cached_pages();
      // This stream's own idle pages are lent: the new block's work follows theirs in
      // stream order, so nothing waits. Other streams' pages need the device idle.
      std::size_t taken = h.large.TakeIdlePages(want, plan.extent, /*lend=*/true);
      lent = taken > 0;
      for (auto& [stream, other] : heaps_) {
        if (taken == want) break;
        if (other.get() != &h) taken += other->large.TakeIdlePages(want - taken, nullptr);
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
        std::max<std::uint64_t>(peak_allocated_.load(std::memory_order_relaxed),
                                ExactAllocated() + bytes));
    const double after =
        static_cast<double>(pages_.reserved_bytes() + pages * pages_.page_bytes());
    const double learned = peak * (1.0 + options_.new_page_headroom) +
                           static_cast<double>(stitched_bytes_);
    const double budget = std::min(
        learned,
        peak * (1.0 + std::max(options_.max_new_page_headroom, options_.new_page_headroom)));
    return after <= budget && after <= static_cast<double>(backend_.capacity());
  }

  // Every idle page unmapped and released, empty slabs and free segments returned.
  void ReleaseAllCached() {
    FlushCaches();
    pages_.Quiesce();
    CollectPending();
    for (auto& [stream, h] : heaps_) h->large.RetireLent(/*all=*/true);
    ReleaseEmptySlabs();
    for (auto& [stream, h] : heaps_) {
      h->large.TakeIdlePages(std::numeric_limits<std::size_t>::max(), nullptr);
      h->large.ReleaseFreeSegments();
    }
    pages_.ReleaseCached();
  }

  std::uint64_t LargestFree() const {
    std::uint64_t largest = 0;
    std::uint64_t idle = pages_.cached_pages();
    for (const auto& [stream, h] : heaps_) {
      largest = std::max<std::uint64_t>(largest, h->large.largest_free());
      idle += h->large.IdlePages();
    }
    // Idle pages can be stitched into one range of any shape.
    if (pages_.vmm()) largest = std::max<std::uint64_t>(largest, idle * pages_.page_bytes());
    return largest;
  }

  absl::Status Oom(std::size_t bytes, StreamId stream) {
    FlushCaches();  // cached blocks are free memory in the report
    ++stats_.oom_count;
    last_oom_.requested_bytes = bytes;
    last_oom_.allocated_bytes = ExactAllocated();
    last_oom_.reserved_bytes = pages_.reserved_bytes();
    last_oom_.largest_free_bytes = LargestFree();
    last_oom_.capacity_bytes = backend_.capacity();
    Notify(AllocatorEventKind::kOom, 0, bytes, stream);
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
  absl::flat_hash_map<StreamId, std::unique_ptr<StreamHeap>> heaps_;
  StreamHeap* last_heap_ = nullptr;
  // Live blocks not recorded in a thread cache (cache off, pending, or their thread gone).
  absl::flat_hash_map<DevicePtr, LiveBlock> live_;
  absl::flat_hash_map<DevicePtr, std::vector<StreamId>> used_on_;  // RecordStream
  AllocatorStats stats_;  // counts of the locked paths; the caches keep their own
  const std::uint64_t id_;  // this allocator, to the threads' caches
  const bool block_events_;  // the observer wants kAlloc and kFree
  const bool cache_on_;
  const ThreadCacheLimits limits_;
  std::vector<std::shared_ptr<ThreadCache>> caches_;  // every thread's cache
  std::atomic<bool> caching_;        // Caching()
  std::uint32_t locked_calls_ = 0;     // LockNotingContention's window (mu_)
  std::uint32_t contended_calls_ = 0;  // of which found the lock held
  // Changed without mu_ by cached calls; alone on their line, away from mu_.
  alignas(64) std::atomic<std::uint64_t> allocated_{0};
  std::atomic<std::uint64_t> peak_allocated_{0};
  OomReport last_oom_;
  std::uint64_t stitched_bytes_ = 0;  // bytes of idle pages ever remapped: raises the budget
};

}  // namespace

std::unique_ptr<DeviceAllocator> MakeCachingAllocator(Backend& backend,
                                                      CachingAllocatorOptions options) {
  return std::make_unique<CachingAllocator>(backend, options);
}

}  // namespace gpumem
