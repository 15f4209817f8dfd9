// Stitches ahead: a heap that once had to stitch a large request (FSDP2's logits-sized
// blocks, ~1 GB in 8 MiB pages: ~100 maps, ~5 ms of the allocating thread) gets a free
// block of that size put together again from its idle pages whenever it lacks one, the
// maps made on the allocator's own thread (BackgroundUnmapper) while training goes on.
// The next such request then finds a free block. Idle pages only: no page is created,
// so reserved memory does not change.
#include <algorithm>
#include <cstddef>
#include <memory>

#include "allocator/caching_allocator_impl.h"

namespace gpumem {
namespace {

// Stitches ahead a stitch on the allocating thread allows. Each moves pages (mapped
// here, unmapped there, off the allocating thread); a loop whose layout has settled no
// longer stitches and so stops moving them after this many.
constexpr std::uint32_t kAheadCredits = 8;

}  // namespace

void CachingAllocator::NoteStitched(StreamHeap& h, std::size_t bytes) {
  if (h.pool != kDefaultPool || h.kind != HeapKind::kLarge) return;
  // A pool still growing stitches while its budget lags its peak; one that has its size
  // and still stitches is cut into pieces its large requests do not fit.
  const std::uint64_t reserved = pages_.reserved_bytes();
  const bool settled = h.stitched_at_reserved == reserved;
  h.stitched_at_reserved = reserved;
  if (!settled) return;
  h.largest_stitched = std::max(h.largest_stitched, bytes);
  h.ahead_credits = kAheadCredits;
}

void CachingAllocator::StitchAheadFor(StreamHeap& h) {
  if (h.ahead != nullptr) {
    CollectAhead(h, /*wait=*/false);
    if (h.ahead != nullptr) return;
  }
  if (h.ahead_credits == 0 || Capturing() || !options_.stitch_ahead) return;
  const std::size_t page = pages_.page_bytes();
  const std::size_t want = RoundUp(h.largest_stitched, page) / page;
  if (h.large.largest_free() >= want * page) return;
  // Near the cap, pages moved ahead may be what the next requests need where they are
  // (under a cap every stitch is forced): resnet50's smallest device rose from 3,064 to
  // 3,090 MiB in the replay.
  if (pages_.reserved_bytes() + want * page > backend_.capacity()) return;
  // Nothing freed since a try that found too few idle pages: there are no more now.
  const std::uint32_t frees = h.large.free_seq();
  if (h.ahead_short_at == frees) return;
  // One idle page more than needed: the free block the request would otherwise carve
  // keeps a page.
  if (h.large.free_bytes() < (want + 1) * page || h.large.IdlePages() < want + 1) {
    h.ahead_short_at = frees;
    return;
  }
  StartStitchAhead(h, want);
}

// The pages are lent, as a stitch's (LargePool::TakeIdlePages): mapped at a fresh range
// of this heap, whose stream's later work follows their old work in stream order, and a
// borrower from another stream waits for this stream's work up to now (the new block's
// free count, as for any range added). Their old addresses go to the unmapper.
void CachingAllocator::StartStitchAhead(StreamHeap& h, std::size_t pages) {
  pages_.BeginSlowPath();  // the device was not waited for since the last slow path
  const std::size_t page = pages_.page_bytes();
  std::size_t va_bytes = std::max(options_.range_va_bytes, pages * page);
  absl::StatusOr<DevicePtr> va = pages_.ReserveRange(va_bytes);
  if (!va.ok() && va_bytes > pages * page) {
    va_bytes = pages * page;
    va = pages_.ReserveRange(va_bytes);
  }
  if (!va.ok()) return;
  const std::size_t taken = h.large.TakeIdlePages(pages, nullptr, /*lend=*/true, FenceWaiter(h));
  auto job = std::make_shared<MapJob>();
  job->va = *va;
  job->page_bytes = page;
  job->pages = pages_.DetachCached(taken);
  h.ahead = job;
  h.ahead_va_bytes = va_bytes;
  --h.ahead_credits;
  ++stats_.stitch_ahead_count;
  if (options_.background_unmap && unmapper_ == nullptr) StartUnmapper();
  if (unmapper_ != nullptr) {
    unmapper_->Submit(job);
  } else {  // no thread of its own (replays): mapped here, all or nothing
    job->status = backend_.MapPages(job->va, page, job->pages.data(), job->pages.size());
    job->mapped = job->status.ok() ? job->pages.size() : 0;
    job->finished.store(true, std::memory_order_release);
  }
  RetireLent();
  CollectAhead(h, /*wait=*/false);
}

void CachingAllocator::CollectAhead(StreamHeap& h, bool wait) {
  if (h.ahead == nullptr) return;
  if (!h.ahead->finished.load(std::memory_order_acquire)) {
    if (!wait) return;
    unmapper_->FinishMaps();
  }
  const MapJob& job = *h.ahead;
  const absl::Span<const PhysicalHandle> pages(job.pages);
  pages_.AdoptMapped(job.va, pages.first(job.mapped));
  stats_.stitch_ahead_pages += job.mapped;
  if (job.mapped > 0) {
    h.large.AddFreeRange(job.va, h.ahead_va_bytes, job.mapped * job.page_bytes);
  } else {
    pages_.ReleaseRange(job.va, h.ahead_va_bytes);
  }
  if (job.mapped < pages.size()) {
    // Lent pages back in the cache could go to another stream's growth: make them safe
    // (the device refused a map; rare).
    pages_.ReturnCached(pages.subspan(job.mapped));
    pages_.BeginSlowPath();
    pages_.Quiesce();
  }
  h.ahead.reset();
}

void CachingAllocator::FinishStitchesAhead() {
  for (auto& [key, h] : heaps_) CollectAhead(*h, /*wait=*/true);
}

}  // namespace gpumem
