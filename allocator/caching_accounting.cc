// The caching allocator's accounting: the live totals and their peaks (the scheme is
// described in caching_allocator_impl.h, above AddFast), blocks pending on other streams,
// the peaks by kind, and the stats and detailed stats read from them.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>

#include "allocator/caching_allocator_impl.h"

namespace gpumem {
namespace {

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

void RaisePeaks(std::array<std::uint64_t, 3>& peaks, const std::array<std::uint64_t, 3>& now) {
  for (int k = 0; k < 3; ++k) peaks[k] = std::max(peaks[k], now[k]);
}

}  // namespace

AllocatorStats CachingAllocator::stats() const {
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
  s.largest_free_bytes = LargestFree(kDefaultPool);
  s.private_pools_free_bytes = OtherPoolsFree(kDefaultPool);
  return s;
}

void CachingAllocator::ResetPeaks() {
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

DetailedStats CachingAllocator::detailed_stats() const {
  std::lock_guard lock(mu_);
  DetailedStats s = RawDetailedStats();
  SubtractAccumulated(s, accumulated_base_);
  return s;
}

void CachingAllocator::ResetAccumulated() {
  std::lock_guard lock(mu_);
  accumulated_base_ = RawDetailedStats();
}

void CachingAllocator::AddSlow(Rest rest) {
  LockedCaches caches(caches_);
  const Rest live = FoldCredits();
  const bool raised = bytes_.Set(live.bytes + rest.bytes);
  count_.Set(live.count + rest.count);
  if (raised || pending_count_ != 0) SamplePeaks(TotalTally());
}

Rest CachingAllocator::FoldCredits() {
  const Rest live = LiveCachesHeld();
  for (const std::shared_ptr<ThreadCache>& c : caches_) {
    c->credit = 0;
    c->count_credit = 0;
  }
  bytes_.g.store(live.bytes, std::memory_order_relaxed);
  count_.g.store(live.count, std::memory_order_relaxed);
  return live;
}

Rest CachingAllocator::ExactLive() const {
  LockedCaches caches(caches_);
  return LiveCachesHeld();
}

Rest CachingAllocator::LiveCachesHeld() const {
  Rest live{bytes_.get(), count_.get()};
  for (const std::shared_ptr<ThreadCache>& c : caches_) {
    live.bytes -= c->credit;
    live.count -= c->count_credit;
  }
  return live;
}

AllocTally CachingAllocator::TotalTally() const {
  AllocTally t = tally_;
  for (const std::shared_ptr<ThreadCache>& c : caches_) t += c->tally;
  return t;
}

KindFigures CachingAllocator::Figures(const AllocTally& t, int k) const {
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

void CachingAllocator::SamplePeaks(const AllocTally& t) {
  for (int k = 0; k < 3; ++k) kind_peaks_[k].Raise(Figures(t, k));
}

void CachingAllocator::BeginPending() {
  LockedCaches caches(caches_);
  pending_any_.store(true, std::memory_order_relaxed);
}

void CachingAllocator::AddPending(const LiveBlock& live) {
  if (pending_count_ == 0) BeginPending();
  ++pending_count_;
  pending_bytes_ += live.requested;
  if (live.size_class >= 0) {
    ++pending_small_count_;
    pending_small_bytes_ += live.requested;
  }
}

void CachingAllocator::SubPending(const LiveBlock& live) {
  --pending_count_;
  pending_bytes_ -= live.requested;
  if (live.size_class >= 0) {
    --pending_small_count_;
    pending_small_bytes_ -= live.requested;
  }
  if (pending_count_ == 0) pending_any_.store(false, std::memory_order_relaxed);
}

void CachingAllocator::SampleReserved() {
  const std::uint64_t reserved = pages_.reserved_bytes();
  const std::uint64_t slab_bytes = slab_bytes_added_ - slab_bytes_removed_;
  const std::uint64_t slabs = slabs_added_ - slabs_removed_;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, reserved);
  RaisePeaks(reserved_peaks_, {reserved, slab_bytes, reserved - slab_bytes});
  RaisePeaks(segment_peaks_, {pages_.ranges() + slabs, slabs, pages_.ranges()});
}

DetailedStats CachingAllocator::RawDetailedStats() const {
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

void CachingAllocator::FillBlockStats(DetailedStats& s, const AllocTally& t,
                                      std::uint64_t peak_bytes,
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

void CachingAllocator::FillReservedStats(DetailedStats& s) const {
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

}  // namespace gpumem
