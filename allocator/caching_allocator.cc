#include "allocator/caching_allocator.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/large_pool.h"
#include "allocator/page_heap.h"
#include "allocator/size_classes.h"
#include "allocator/small_pool.h"
#include "allocator/stream_guard.h"

namespace gpumem {
namespace {

// Growth room per range. Ranges in the real traces never outgrow 1 GiB (replays are the
// same from 1 to 64 GiB), while up to ~200 ranges are live: 4 GiB keeps the address space
// held (~800 GiB) far from the GPU's limit. A larger request gets a range of its own size.
constexpr std::size_t kMaxRangeVa = std::size_t{4} << 30;
// Requests beyond this cannot be rounded without overflow; no device has that much.
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

class CachingAllocator final : public DeviceAllocator {
 public:
  CachingAllocator(Backend& backend, CachingAllocatorOptions options)
      : backend_(backend),
        options_(options),
        pages_(backend, options.device, options.observer),
        guard_(backend) {
    options_.small_limit = std::min(options_.small_limit, kSmallLimit);
    if (options_.range_va_bytes == 0) {
      options_.range_va_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(
          RoundUp(backend.capacity(), backend.granularity()), kMaxRangeVa));
    }
    live_.reserve(1024);
  }

  ~CachingAllocator() override {
    // Waits for queued work, so pages can be unmapped; the heaps return everything.
    pages_.BeginSlowPath();
    pages_.Quiesce();
  }

  std::string_view name() const override { return "gpumem"; }

  absl::StatusOr<DevicePtr> Allocate(std::size_t bytes, StreamId stream) override {
    std::lock_guard lock(mu_);
    if (bytes > kMaxRequest) return Oom(bytes, stream);
    if (!guard_.empty()) CollectPending();
    StreamHeap* h = Heap(stream);
    Live live{nullptr, nullptr, h, bytes, false};
    DevicePtr ptr;
    if (bytes <= options_.small_limit) {
      const int c = SizeClasses::ClassOf(bytes);
      ptr = h->small.Allocate(c, &live.slab);
      if (ptr == 0) {
        Block* b = AllocateLarge(*h, SizeClasses::SlabBytes(c));
        if (b == nullptr) return Oom(bytes, stream);
        h->small.AddSlab(c, b);
        ptr = h->small.Allocate(c, &live.slab);
      }
    } else {
      Block* b = AllocateLarge(*h, RoundUp(bytes, kBlockAlign));
      if (b == nullptr) return Oom(bytes, stream);
      live.block = b;
      ptr = b->addr;
    }
    live_.emplace(ptr, live);
    stats_.allocated_bytes += bytes;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.active_blocks;
    ++stats_.alloc_count;
    Notify(AllocatorEventKind::kAlloc, ptr, bytes, stream);
    return ptr;
  }

  void Free(DevicePtr ptr) override {
    std::lock_guard lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end() || it->second.pending) return;  // not ours, or freed already
    Live& live = it->second;
    stats_.allocated_bytes -= live.requested;
    --stats_.active_blocks;
    ++stats_.free_count;
    Notify(AllocatorEventKind::kFree, ptr, live.requested, live.heap->stream);
    if (!used_on_.empty()) {
      auto u = used_on_.find(ptr);
      if (u != used_on_.end()) {
        live.pending = true;
        guard_.Defer(ptr, u->second);
        used_on_.erase(u);
        return;
      }
    }
    Release(it);
  }

  bool RecordStream(DevicePtr ptr, StreamId stream) override {
    std::lock_guard lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end() || it->second.pending) return false;
    if (it->second.heap->stream == stream) return true;
    std::vector<StreamId>& streams = used_on_[ptr];
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) {
      streams.push_back(stream);
    }
    return true;
  }

  void EmptyCache() override {
    std::lock_guard lock(mu_);
    pages_.BeginSlowPath();
    ReleaseAllCached();
  }

  AllocatorStats stats() const override {
    std::lock_guard lock(mu_);
    AllocatorStats s = stats_;
    s.reserved_bytes = pages_.reserved_bytes();
    s.peak_reserved_bytes = std::max(s.peak_reserved_bytes, s.reserved_bytes);
    s.largest_free_bytes = LargestFree();
    return s;
  }

  void ResetPeaks() override {
    std::lock_guard lock(mu_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = pages_.reserved_bytes();
  }

  OomReport last_oom() const override {
    std::lock_guard lock(mu_);
    return last_oom_;
  }

 private:
  struct StreamHeap {
    StreamHeap(PageHeap& pages, std::size_t range_va, StreamId s)
        : large(pages, range_va, s), stream(s) {}
    LargePool large;  // declared first: slabs live in its blocks, so it goes last
    SmallPool small;
    StreamId stream;
  };
  struct Live {
    Block* block;      // large blocks
    Slab* slab;        // small blocks
    StreamHeap* heap;  // the stream it was allocated on
    std::size_t requested;
    bool pending;      // freed, waiting for other streams' events
  };

  StreamHeap* Heap(StreamId stream) {
    if (last_heap_ != nullptr && last_heap_->stream == stream) return last_heap_;
    std::unique_ptr<StreamHeap>& h = heaps_[stream];
    if (h == nullptr) h = std::make_unique<StreamHeap>(pages_, options_.range_va_bytes, stream);
    last_heap_ = h.get();
    return last_heap_;
  }

  void Release(absl::flat_hash_map<DevicePtr, Live>::iterator it) {
    Live& live = it->second;
    if (live.slab != nullptr) {
      live.heap->small.Free(live.slab, it->first);
    } else {
      live.heap->large.Free(live.block);
    }
    live_.erase(it);
  }

  void CollectPending() {
    guard_.Collect([this](DevicePtr ptr) { Release(live_.find(ptr)); });
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
        std::max<std::uint64_t>(stats_.peak_allocated_bytes, stats_.allocated_bytes + bytes));
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
    ++stats_.oom_count;
    last_oom_.requested_bytes = bytes;
    last_oom_.allocated_bytes = stats_.allocated_bytes;
    last_oom_.reserved_bytes = pages_.reserved_bytes();
    last_oom_.largest_free_bytes = LargestFree();
    last_oom_.capacity_bytes = backend_.capacity();
    Notify(AllocatorEventKind::kOom, 0, bytes, stream);
    return absl::ResourceExhaustedError(last_oom_.ToString());
  }

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
  absl::flat_hash_map<DevicePtr, Live> live_;
  absl::flat_hash_map<DevicePtr, std::vector<StreamId>> used_on_;  // RecordStream
  AllocatorStats stats_;
  OomReport last_oom_;
  std::uint64_t stitched_bytes_ = 0;  // bytes of idle pages ever remapped: raises the budget
};

}  // namespace

std::unique_ptr<DeviceAllocator> MakeCachingAllocator(Backend& backend,
                                                      CachingAllocatorOptions options) {
  return std::make_unique<CachingAllocator>(backend, options);
}

}  // namespace gpumem
