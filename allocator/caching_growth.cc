// The caching allocator's slow path and the memory it gives back: growth when no free
// block fits (stitching idle pages or creating new ones within a budget, keeping the
// headroom), the retries that wait for the device and trim, the OOM report, and
// EmptyCache / ReleaseIdle.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <system_error>

#include "allocator/caching_allocator_impl.h"

namespace gpumem {
namespace {

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

}  // namespace

// A no-op while a capture is under way: releasing memory would break it.
void CachingAllocator::EmptyCache() {
  std::lock_guard lock(mu_);
  GiveBackIdle();
}

void CachingAllocator::ReleaseIdle() {
  if (t_growing == this) return;  // our own driver call failed: the slow path handles it
  std::lock_guard lock(mu_);
  GiveBackIdleForOthers();
}

// One free-memory query per outside allocation: those are rare (handles, communicators,
// workspaces), and a burst of them (NCCL's first collective) is what the reserve is for.
void CachingAllocator::KeepHeadroom() {
  if (options_.headroom_bytes == 0 || t_growing == this) return;
  std::lock_guard lock(mu_);
  if (backend_.DeviceFreeBytes() < options_.headroom_bytes && HoldsIdle()) {
    GiveBackIdleForOthers();
  }
}

// Memory handed to other libraries was this allocator's working set: where the steps
// need it again, it may come back even though the driver is then under the headroom
// (HeadroomFor), as it would never have left PyTorch's cache.
void CachingAllocator::GiveBackIdleForOthers() {
  given_for_others_ = std::max(given_for_others_, pages_.reserved_bytes());
  GiveBackIdle();
}

OomReport CachingAllocator::last_oom() const {
  std::lock_guard lock(mu_);
  return last_oom_;
}

// Unmaps the old addresses of lent pages whose work is done (all, once quiet); with
// background_unmap, hands them to the unmapper's thread.
void CachingAllocator::RetireLent() {
  for (auto& [key, h] : heaps_) {
    if (h->large.lent_pages() == 0) continue;
    if (options_.background_unmap && unmapper_ == nullptr) StartUnmapper();
    h->large.RetireLent(/*all=*/pages_.quiet());
  }
}

// The thread starts at the first stitch that lent pages: most processes never need it.
// Its driver calls are this allocator's growth: a tracer's callback on their failure
// must not ask it to release memory (ReleaseIdle) while its lock waits for the thread.
// A thread the system refuses leaves the unmaps where they were, on this thread.
void CachingAllocator::StartUnmapper() {
  try {
    unmapper_ = std::make_unique<BackgroundUnmapper>(backend_, [this] { t_growing = this; });
  } catch (const std::system_error&) {
    options_.background_unmap = false;
    return;
  }
  for (auto& [key, h] : heaps_) h->large.set_unmapper(unmapper_.get());
}

std::size_t CachingAllocator::EmptySlabBytes() const {
  std::size_t n = 0;
  for (const auto& [key, h] : heaps_) n += h->small.empty_bytes();
  return n;
}

void CachingAllocator::ReleaseEmptySlabs() {
  for (auto& [key, h] : heaps_) ReleaseEmptySlabs(*h);
}

// Empty slabs back to their heap's large pool (its memory stays in the heap's pool).
void CachingAllocator::ReleaseEmptySlabs(StreamHeap& h) {
  LargePool& large = h.large;
  h.small.ReleaseEmpty([&](Block* b) {
    slab_bytes_removed_ += b->size;
    ++slabs_removed_;
    large.Free(b);
  });
}

Block* CachingAllocator::AllocateLarge(StreamHeap& h, std::size_t bytes, LiveBlock* borrower) {
  if (Block* b = h.large.BestFit(bytes)) return b;
  if (borrower != nullptr && h.kind == HeapKind::kMedium) {
    if (Block* b = LargeHeapPiece(h, bytes, borrower)) return b;
  }
  GrowingScope growing(this);
  Block* b = CannotFit(bytes)    ? nullptr
             : Capturing()       ? AllocateCapturing(h, bytes)
                                 : AllocateSlow(h, bytes, borrower);
  SampleReserved();
  return b;
}

// A medium block (`live` its record) from a free piece of its stream's large heap smaller
// than a page, if one fits. Such a piece holds no whole page that the block could pin
// (the medium heap exists because medium blocks cut from the large heap's larger free
// blocks kept those pages once the large blocks around them went), and it would
// otherwise wait for its neighbours' frees or a growth into the hole beside it: on
// resnet50, the large heap's pieces beside stitched-out pages.
Block* CachingAllocator::LargeHeapPiece(StreamHeap& h, std::size_t bytes, LiveBlock* live) {
  auto it = heaps_.find(HeapKey{h.pool, h.stream, HeapKind::kLarge});
  if (it == heaps_.end()) return nullptr;
  LargePool& pool = it->second->large;
  const std::size_t fit = pool.FitSize(bytes);
  if (fit == 0 || fit >= pages_.page_bytes()) return nullptr;
  live->heap = it->second.get();
  return pool.BestFit(bytes);
}

// Whether `bytes` more cannot fit even with every idle byte reclaimed: live and
// pending blocks pin their bytes at least. Such a request fails before any page is
// created, mapped or unmapped. Pending blocks pin theirs only until the work on their
// other streams has run: a request that fits without them first waits for the device
// (an OOM costs more than a wait, and a failed event query may be all that holds them).
bool CachingAllocator::CannotFit(std::size_t bytes) {
  const std::uint64_t capacity = backend_.capacity();
  const std::uint64_t live = ExactLive().bytes;
  if (bytes > capacity || live > capacity - bytes) return true;
  if (pending_bytes_ <= capacity - bytes - live) return false;
  if (Capturing()) return true;  // nothing is waited for during a capture
  pages_.BeginSlowPath();
  pages_.Quiesce();
  CollectPending(/*synchronized=*/true);
  CollectFences(/*synchronized=*/true);
  return pending_bytes_ > capacity - bytes - live;
}

// A capture is under way: free blocks and new pages only. Nothing is unmapped, waited
// for or released, so a request that does not fit fails (OOM) without trimming.
Block* CachingAllocator::AllocateCapturing(StreamHeap& h, std::size_t bytes) {
  FlushCaches();
  ReleaseEmptySlabs(h);
  if (Block* b = h.large.BestFit(bytes)) return b;
  absl::StatusOr<Block*> grown = Grow(h, bytes, /*budget=*/true);
  return grown.ok() ? *grown : nullptr;
}

// No free block fits. In order: take back what pending frees and empty slabs hold, grow
// from idle and new pages; if the device is full, wait for all queued work and retry;
// then release every cached byte and retry once more.
Block* CachingAllocator::AllocateSlow(StreamHeap& h, std::size_t bytes, LiveBlock* borrower) {
  pages_.BeginSlowPath();
  refused_for_headroom_ = false;
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
  for (; attempt < 3 && b == nullptr; ++attempt) b = AttemptGrowth(h, bytes, attempt, borrower);
  if (attempt > 1 || stats_.stitch_count != stitches) ++retries_;
  return b;
}

// One round of AllocateSlow: the later ones wait for the device, stitch whatever the
// budget says and, after the second, trim every cached byte.
Block* CachingAllocator::AttemptGrowth(StreamHeap& h, std::size_t bytes, int attempt,
                                       LiveBlock* borrower) {
  if (attempt > 0) pages_.Quiesce();  // every pending event has now completed
  // No event need be asked once the device was waited for: a failed query would hold
  // the block (and its bytes, against this request) for nothing.
  CollectPending(/*synchronized=*/pages_.quiet());
  if (pages_.quiet()) CollectFences(/*synchronized=*/true);
  RetireLent();
  if (attempt > 0 || EmptySlabBytes() > options_.slab_cache_bytes) ReleaseEmptySlabs();
  if (Block* b = h.large.BestFit(bytes)) return b;
  if (Block* b = Borrow(h, bytes, borrower)) return b;
  if (HeadroomFor(h, bytes) != HeadroomUse::kKept) return GrowFromIdle(h, bytes);
  absl::StatusOr<Block*> grown = Grow(h, bytes, /*budget=*/attempt == 0);
  if (grown.ok()) return *grown;
  if (attempt == 1) {
    ReleaseAllCached();
    ++stats_.trim_count;
  }
  return nullptr;
}

// The best fit for `bytes` among the free blocks of the other streams' heaps of `h`'s pool
// and kind (CachingAllocatorOptions::borrow), for `h`'s stream; null if none fits.
// `borrower` is the block's record: at its free the block goes back to the lender's heap
// behind a fence (RetireBorrowed).
Block* CachingAllocator::Borrow(StreamHeap& h, std::size_t bytes, LiveBlock* borrower) {
  if (borrower == nullptr || !options_.borrow || h.pool != kDefaultPool) return nullptr;
  StreamHeap* lender = nullptr;
  std::size_t fit = std::numeric_limits<std::size_t>::max();
  for (auto& [key, other] : heaps_) {
    if (other.get() == &h || other->pool != h.pool || other->kind != h.kind) continue;
    const std::size_t size = other->large.FitSize(bytes);
    if (size != 0 && size < fit) {
      fit = size;
      lender = other.get();
    }
  }
  if (lender == nullptr) return nullptr;
  Block* b = lender->large.BestFit(bytes);
  if (!pages_.quiet()) OrderAfterUsers(*lender, *b, h.stream);
  borrower->heap = lender;
  borrower->borrowed = true;
  borrower->recorded = true;  // its free takes the lock (RetireBorrowed)
  ++stats_.cross_stream_borrows;
  return b;
}

// Makes `borrower` wait (on the device) for the work that may still use `b`, a free block
// of `lender`: its stream's work up to the block's last use there (Block::used_at), and
// the streams that borrowed it before (its fences). Not for everything queued on the
// lender's stream: FSDP2's all-gather stream borrows its prefetch's buffers from the
// compute stream's heap, and would wait for the computation it prefetches for.
void CachingAllocator::OrderAfterUsers(StreamHeap& lender, const Block& b, StreamId borrower) {
  for (const StreamHeap::Fence& f : lender.fences) {
    if (f.stream != borrower && f.addr < b.end() && b.addr < f.addr + f.size) {
      OrderAfter(borrower, f.event);
    }
  }
  // Counts more than 2^30 frees apart may have wrapped: such a checkpoint is not used.
  const std::uint32_t now = lender.large.free_seq();
  auto covers = [&](std::uint32_t at) {
    return LaterCount(b.used_at, at) == at && now - at < (std::uint32_t{1} << 30);
  };
  if (lender.ran_at && covers(*lender.ran_at)) return;  // that work has run
  if (lender.checkpoint == 0 || !covers(lender.checkpoint_at)) {
    if (lender.checkpoint != 0) backend_.ReleaseEvent(lender.checkpoint);
    lender.checkpoint = backend_.RecordEvent(lender.stream);
    lender.checkpoint_at = now;
  }
  if (lender.checkpoint != 0) OrderAfter(borrower, lender.checkpoint);
}

// What growth for `bytes` would do to the driver's free memory against the headroom
// (CachingAllocatorOptions::headroom_bytes). The one free-memory query.
CachingAllocator::HeadroomUse CachingAllocator::HeadroomFor(StreamHeap& h,
                                                            std::size_t bytes) const {
  if (options_.headroom_bytes == 0) return HeadroomUse::kKept;
  const std::uint64_t created = NewBytesFor(h, bytes);
  if (created == 0) return HeadroomUse::kKept;
  const std::uint64_t free = backend_.DeviceFreeBytes();
  if (free < created) return HeadroomUse::kBeyondDevice;
  if (free - created >= options_.headroom_bytes) return HeadroomUse::kKept;
  // Taking back what went to other libraries: they had their room when they needed it.
  return pages_.reserved_bytes() + created <= given_for_others_ ? HeadroomUse::kKept
                                                                : HeadroomUse::kEaten;
}

// At most the memory growth for `bytes` creates: the pages that the page cache lacks,
// or a segment.
std::uint64_t CachingAllocator::NewBytesFor(const StreamHeap& h, std::size_t bytes) const {
  if (!pages_.vmm()) return bytes;
  const std::size_t need = h.large.PlanGrowth(bytes).pages();
  const std::size_t cached = pages_.cached_pages();
  return need > cached ? (need - cached) * pages_.page_bytes() : 0;
}

// Growth that keeps the headroom: every idle page goes to the page cache, growth maps
// from there first, and the idle pages it leaves go back to the device. A request that
// would still eat the reserve is refused: the reserve is for the libraries whose own
// failures never say memory (a batch-size finder would otherwise settle on a batch that
// leaves the driver nothing, and the next cuBLAS handle or NCCL communicator fails).
Block* CachingAllocator::GrowFromIdle(StreamHeap& h, std::size_t bytes) {
  ++stats_.trim_count;
  CollectIdleOf([this](const StreamHeap& heap) { return Reclaimable(heap); });
  Block* b = h.large.BestFit(bytes);
  if (b == nullptr) {
    const HeadroomUse use = HeadroomFor(h, bytes);
    refused_for_headroom_ = use == HeadroomUse::kEaten;
    absl::StatusOr<Block*> grown = use == HeadroomUse::kKept
                                       ? Grow(h, bytes, /*budget=*/false)
                                       : absl::StatusOr<Block*>(nullptr);
    if (grown.ok()) b = *grown;
  }
  pages_.ReleaseCached();
  return b;
}

// `budget`: new pages are preferred to stitching within the growth budget. Off on the
// retries: the device refused pages, so idle ones are stitched before anything is trimmed.
absl::StatusOr<Block*> CachingAllocator::Grow(StreamHeap& h, std::size_t bytes, bool budget) {
  if (!pages_.vmm()) return h.large.Grow({}, bytes);
  const LargePool::Plan plan = h.large.PlanGrowth(bytes);
  const std::size_t need = plan.pages();
  std::size_t reused = pages_.cached_pages();
  bool lent = false;
  // No stitching during a capture: it would unmap (or lend, recording and waiting for
  // events).
  if (options_.stitch && !Capturing() && need > pages_.cached_pages() &&
      !(budget && NewPagesFit(h, need - pages_.cached_pages(), bytes))) {
    const std::size_t taken =
        TakeIdlePagesFor(h, need - pages_.cached_pages(), plan.extent, &lent);
    reused += taken;
    stitched_bytes_ += taken * pages_.page_bytes();
  }
  absl::StatusOr<Block*> b;
  {
    BackgroundUnmapper::Pause pause(unmapper_.get());  // the maps go first
    b = h.large.Grow(plan, bytes);
  }
  if (b.ok() && reused > 0) ++stats_.stitch_count;
  // Lent pages left in the cache could go to another stream's growth: make them safe.
  if (lent && !b.ok()) pages_.Quiesce();
  // Their old addresses go to the unmapper now, to be unmapped while this thread goes on.
  if (lent && options_.background_unmap) RetireLent();
  return b;
}

// Up to `want` idle pages of `h`'s pool (never in `keep`) into the page cache for a growth
// of `h`: its own first, then its stream's other heap's, then other streams'; `lent` is
// set if any of them was lent. This stream's pages are lent: the new block's work follows
// theirs in stream order, so nothing waits.
std::size_t CachingAllocator::TakeIdlePagesFor(StreamHeap& h, std::size_t want,
                                               const Block* keep, bool* lent) {
  // Lent pages are unmapped from their old addresses once an event recorded on their
  // stream has completed: that stream first waits for the borrowers' work on them, and
  // on nothing else (FSDP2's compute stream would wait for prefetches it does not need).
  std::size_t taken = h.large.TakeIdlePages(want, keep, /*lend=*/true, FenceWaiter(h));
  for (auto& [key, other] : heaps_) {
    if (taken == want) break;
    if (other.get() != &h && other->pool == h.pool && other->stream == h.stream) {
      taken += other->large.TakeIdlePages(want - taken, nullptr, /*lend=*/true,
                                          FenceWaiter(*other));
    }
  }
  *lent = taken > 0;
  // Another pool's pages are never taken, nor are this pool's given to another.
  for (auto& [key, other] : heaps_) {
    if (taken == want) break;
    if (other->pool == h.pool && other->stream != h.stream) {
      taken += TakeOtherStreamPages(*other, h, want - taken, lent);
    }
  }
  return taken;
}

// Up to `want` idle pages of `from` for a growth of `to`. Lent too, and `to`'s stream
// made to wait (on the device, the host goes on) for the event recorded on `from`'s
// stream after the work that may still use them; where that wait fails, the device is
// waited for. Once the device was waited for in this slow path, unmapping costs nothing.
std::size_t CachingAllocator::TakeOtherStreamPages(StreamHeap& from, StreamHeap& to,
                                                   std::size_t want, bool* lent) {
  if (pages_.quiet()) return from.large.TakeIdlePages(want, nullptr);
  const std::size_t taken =
      from.large.TakeIdlePages(want, nullptr, /*lend=*/true, FenceWaiter(from));
  if (taken == 0) return 0;
  *lent = true;
  ++stats_.cross_stream_lends;
  OrderAfter(to.stream, from.large.last_lend_event());
  return taken;
}

// Orders `h`'s stream after the borrowers' work on pages it lends (its fences over them);
// nothing to wait for once the device was waited for in this slow path.
LargePool::LendHook CachingAllocator::FenceWaiter(StreamHeap& h) {
  if (pages_.quiet() || h.fences.empty()) return {};
  return [this, &h](DevicePtr addr, std::size_t bytes) { WaitForFences(h, addr, bytes); };
}

void CachingAllocator::OrderAfter(StreamId waiter, EventHandle event) {
  if (backend_.StreamWaitEvent(waiter, event).ok()) return;
  // A fence's wait comes outside any slow path, where quiet() may date from an earlier
  // one: the device is waited for now.
  pages_.BeginSlowPath();
  pages_.Quiesce();
}

// Whether `pages` new pages for `h` keep reserved within the budget for growth without
// stitching (CachingAllocatorOptions::new_page_headroom).
bool CachingAllocator::NewPagesFit(const StreamHeap& h, std::size_t pages,
                                   std::size_t bytes) const {
  const double peak = static_cast<double>(BudgetPeak(h, bytes));
  const double after =
      static_cast<double>(pages_.reserved_bytes() + pages * pages_.page_bytes());
  const double learned = peak * (1.0 + options_.new_page_headroom) +
                         static_cast<double>(stitched_bytes_);
  const double most = std::max(
      peak * (1.0 + std::max(options_.max_new_page_headroom, options_.new_page_headroom)),
      peak + static_cast<double>(options_.min_budget_pages * pages_.page_bytes()));
  const double budget = std::min(learned, most);
  return after <= budget && after <= static_cast<double>(backend_.capacity());
}

// The peak the growth budget is measured against, counting the request of `bytes` for
// `h`: the peak of live bytes; with a medium heap, at least the sum of each kind's peak
// of bytes handed out, each rounded up to whole pages. Kept apart, the kinds' heaps each
// hold their own peak, which come at different moments (a leaky loop's medium blocks
// early in a step, its large ones later): one kind's free pages serve the other only
// by moving every step, which the budget exists to avoid. A heap grows by whole pages.
std::uint64_t CachingAllocator::BudgetPeak(const StreamHeap& h, std::size_t bytes) const {
  const std::uint64_t live = std::max<std::uint64_t>(bytes_.max(), ExactLive().bytes + bytes);
  if (options_.medium_limit == 0) return live;
  std::uint64_t kinds = 0;
  for (std::size_t k = 0; k < kHeapKinds; ++k) {
    const UsageMeter& m = handed_out_[k];
    const std::uint64_t now = m.bytes + (k == static_cast<std::size_t>(h.kind) ? bytes : 0);
    kinds += RoundUp(std::max(m.peak, now), pages_.page_bytes());
  }
  return std::max(live, kinds);
}

// Every idle page unmapped and released, empty slabs and free segments returned; the
// memory of pools in use stays.
void CachingAllocator::ReleaseAllCached() {
  ReleaseCachedOf([this](const StreamHeap& h) { return Reclaimable(h); });
}

// The free memory of the heaps `which` picks released; every cached page too.
void CachingAllocator::ReleaseCachedOf(HeapFilter which) {
  CollectIdleOf(which);
  pages_.ReleaseCached();
  ReleaseDonePools();
}

// Every idle page of the heaps `which` picks into the page cache; their empty slabs and
// free segments returned.
void CachingAllocator::CollectIdleOf(HeapFilter which) {
  FlushCaches();
  pages_.Quiesce();
  CollectPending(/*synchronized=*/true);
  CollectFences(/*synchronized=*/true);
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
void CachingAllocator::GiveBackIdle() {
  if (Capturing()) return;
  FlushCaches();
  pages_.BeginSlowPath();
  ReleaseAllCached();
}

// Whether any memory could go back: cached or idle pages, empty slabs, free segments.
bool CachingAllocator::HoldsIdle() const {
  if (pages_.cached_pages() > 0 || EmptySlabBytes() > 0) return true;
  for (const auto& [key, h] : heaps_) {
    if (h->large.IdlePages() > 0 || (!pages_.vmm() && h->large.largest_free() > 0)) return true;
  }
  return false;
}

std::uint64_t CachingAllocator::LargestFree(PoolId pool) const {
  std::uint64_t largest = 0;
  std::uint64_t idle = pages_.cached_pages();
  for (const auto& [key, h] : heaps_) {
    if (h->pool != pool) continue;  // a pool's pages are never given to another
    largest = std::max<std::uint64_t>(largest, h->large.largest_free());
    idle += h->large.IdlePages();
  }
  // Idle pages can be stitched into one range of any shape.
  if (pages_.vmm()) largest = std::max<std::uint64_t>(largest, idle * pages_.page_bytes());
  return largest;
}

std::uint64_t CachingAllocator::OtherPoolsFree(PoolId pool) const {
  std::uint64_t bytes = 0;
  for (const auto& [key, h] : heaps_) {
    if (h->pool != pool && h->pool != kDefaultPool) bytes += h->large.free_bytes();
  }
  return bytes;
}

absl::Status CachingAllocator::Oom(std::size_t bytes, StreamId stream, PoolId pool) {
  FlushCaches();  // cached blocks are free memory in the report
  ++stats_.oom_count;
  last_oom_.requested_bytes = bytes;
  last_oom_.allocated_bytes = ExactLive().bytes;
  last_oom_.reserved_bytes = pages_.reserved_bytes();
  last_oom_.largest_free_bytes = LargestFree(pool);
  last_oom_.other_pools_free_bytes = OtherPoolsFree(pool);
  last_oom_.capacity_bytes = backend_.capacity();
  last_oom_.headroom_bytes = refused_for_headroom_ ? options_.headroom_bytes : 0;
  refused_for_headroom_ = false;
  // The event's address says the headroom that refused it (0: none), for the trace.
  Notify(AllocatorEventKind::kOom, last_oom_.headroom_bytes, bytes, stream);
  // Caught or not, an OOM leaves the device full: what no live block uses goes back,
  // so the libraries that allocate next (a cuBLAS handle, an NCCL communicator) find it.
  // Only when something is idle: waiting for the device to fail a request is costly.
  if (HoldsIdle()) GiveBackIdle();
  return absl::ResourceExhaustedError(last_oom_.ToString());
}

}  // namespace gpumem
