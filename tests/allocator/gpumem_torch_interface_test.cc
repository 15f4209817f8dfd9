// The caching allocator's side of PyTorch's allocator interface, on the simulated device:
// private pools, capture mode, detailed stats, the layout for snapshots, and OOMs that
// leave the device usable.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/sim_backend.h"
#include "allocator/size_classes.h"
#include "tests/allocator/gpumem_checked_backend.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

constexpr PoolId kPool = 7;

CachingAllocatorOptions WithCaches(bool on) {
  CachingAllocatorOptions o;
  o.thread_cache = on;
  o.thread_cache_single_thread = on;  // caches from the first call
  return o;
}

class PoolTest : public ::testing::TestWithParam<bool> {
 protected:
  CachingAllocatorOptions Options() const { return WithCaches(GetParam()); }
};

TEST_P(PoolTest, PoolBlocksNeverServeAnotherPool) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, Options());
  for (std::size_t size : {std::size_t{4096}, 8 * kMiB}) {
    DevicePtr in_pool = *alloc->AllocateInPool(size, kS1, kPool);
    alloc->Free(in_pool);
    DevicePtr in_default = *alloc->Allocate(size, kS1);
    EXPECT_NE(in_default, in_pool) << size;
    alloc->Free(in_default);
    // And the other way round; the pool reuses its own block.
    DevicePtr again = *alloc->AllocateInPool(size, kS1, kPool);
    EXPECT_EQ(again, in_pool) << size;
    EXPECT_NE(again, in_default) << size;
    alloc->Free(again);
  }
}

TEST_P(PoolTest, PoolMemorySurvivesEmptyCacheUntilReleasedAndLastFreed) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, Options());
  DevicePtr a = *alloc->AllocateInPool(8 * kMiB, kS1, kPool);
  DevicePtr b = *alloc->AllocateInPool(4096, kS1, kPool);
  DevicePtr c = *alloc->AllocateInPool(3 * kMiB, kS1, kPool);
  std::vector<DevicePtr> live{a, b, c};
  std::sort(live.begin(), live.end());
  EXPECT_EQ(alloc->PoolLiveBlocks(kPool), live);
  EXPECT_TRUE(alloc->PoolLiveBlocks(kDefaultPool).empty());
  const std::uint64_t held = sim.counters().physical_bytes;
  alloc->Free(a);
  alloc->EmptyCache();
  EXPECT_EQ(sim.counters().physical_bytes, held);  // the pool is in use
  EXPECT_TRUE(sim.IsAccessible(a, 8 * kMiB));
  alloc->ReleasePool(kPool);
  EXPECT_EQ(sim.counters().physical_bytes, held);  // b and c still live
  alloc->Free(b);
  alloc->Free(c);  // the last one: everything goes
  EXPECT_EQ(alloc->stats().reserved_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
}

TEST_P(PoolTest, ReleasingAnIdlePoolReturnsItsMemoryAtOnce) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, Options());
  DevicePtr keep = *alloc->Allocate(6 * kMiB, kS1);
  const std::uint64_t before = sim.counters().physical_bytes;
  alloc->Free(*alloc->AllocateInPool(10 * kMiB, kS1, kPool));
  EXPECT_GT(sim.counters().physical_bytes, before);
  alloc->ReleasePool(kPool);
  EXPECT_EQ(sim.counters().physical_bytes, before);
  alloc->Free(keep);
}

TEST_P(PoolTest, EmptyPoolCacheReleasesWhatNoLiveBlockUses) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, Options());
  DevicePtr live = *alloc->AllocateInPool(4 * kMiB, kS1, kPool);
  alloc->Free(*alloc->AllocateInPool(6 * kMiB, kS2, kPool));
  DevicePtr other = *alloc->Allocate(4 * kMiB, kS1);
  alloc->Free(other);
  const std::uint64_t before = sim.counters().physical_bytes;
  alloc->EmptyPoolCache(kPool);
  EXPECT_EQ(sim.counters().physical_bytes, before - 6 * kMiB);
  EXPECT_TRUE(sim.IsAccessible(live, 4 * kMiB));
  alloc->Free(live);
}

TEST_P(PoolTest, StitchingNeverTakesAnotherPoolsPages) {
  SimBackend sim({.capacity = 8 * kPage});
  auto alloc = MakeCachingAllocator(sim, Options());
  // The pool holds 4 idle pages; the default pool has the other 4 only.
  std::vector<DevicePtr> pool_blocks;
  for (int i = 0; i < 4; ++i) pool_blocks.push_back(*alloc->AllocateInPool(kPage, kS1, kPool));
  for (DevicePtr p : pool_blocks) alloc->Free(p);
  EXPECT_FALSE(alloc->Allocate(6 * kPage, kS1).ok());
  EXPECT_FALSE(alloc->Allocate(6 * kPage, kS2).ok());
  for (DevicePtr p : pool_blocks) EXPECT_TRUE(sim.IsAccessible(p, kPage));
  // Once released, its pages serve everyone.
  alloc->ReleasePool(kPool);
  EXPECT_TRUE(alloc->Allocate(6 * kPage, kS1).ok());
}

TEST_P(PoolTest, APoolGrowsWithNewPagesRatherThanStitchingTheDefaultPools) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, Options());
  DevicePtr d = *alloc->Allocate(16 * kMiB, kS1);
  alloc->Free(d);
  // Past the growth budget: without pools these pages would be stitched.
  DevicePtr p = *alloc->AllocateInPool(16 * kMiB, kS2, kPool);
  EXPECT_EQ(sim.counters().unmaps, 0u);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_TRUE(sim.IsAccessible(d, 16 * kMiB));
  EXPECT_EQ(alloc->stats().stitch_count, 0u);
  alloc->Free(p);
}

// A graph kept alive keeps its pool's free memory: a request outside the pool that does
// not fit is told so, and not that the pool's free block could have served it.
TEST_P(PoolTest, AnOomNamesTheFreeMemoryOtherPoolsHold) {
  SimBackend sim({.capacity = 32 * kMiB});
  auto alloc = MakeCachingAllocator(sim, Options());
  alloc->Free(*alloc->AllocateInPool(20 * kMiB, kS1, kPool));
  EXPECT_EQ(alloc->stats().private_pools_free_bytes, 20 * kMiB);
  EXPECT_FALSE(alloc->Allocate(16 * kMiB, kS1).ok());
  const OomReport oom = alloc->last_oom();
  EXPECT_EQ(oom.other_pools_free_bytes, 20 * kMiB);
  EXPECT_LT(oom.largest_free_bytes, 16 * kMiB);
  EXPECT_NE(oom.ToString().find("20.00 MiB of the reserved memory is free inside private pools"),
            std::string::npos)
      << oom.ToString();
  // Into the pool itself, its free block serves.
  DevicePtr in_pool = *alloc->AllocateInPool(16 * kMiB, kS1, kPool);
  EXPECT_EQ(alloc->stats().private_pools_free_bytes, 4 * kMiB);
  alloc->Free(in_pool);
  alloc->ReleasePool(kPool);
  EXPECT_EQ(alloc->stats().private_pools_free_bytes, 0u);
}

// A checkpointed pool state is restored by putting each block back where it was, small
// ones included, even after the pool coalesced them with their free neighbours.
TEST_P(PoolTest, BlocksGoBackWhereTheyWereAfterThePoolCoalescedThem) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, Options());
  DevicePtr small = *alloc->AllocateInPool(4096, kS1, kPool);
  DevicePtr large = *alloc->AllocateInPool(3 * kMiB, kS1, kPool);
  DevicePtr keep = *alloc->AllocateInPool(kMiB, kS1, kPool);
  alloc->Free(small);
  alloc->Free(large);
  ASSERT_EQ(*alloc->AllocateAt(large, 3 * kMiB, kS1, kPool), large);
  ASSERT_EQ(*alloc->AllocateAt(small, 4096, kS1, kPool), small);
  std::vector<DevicePtr> live{small, large, keep};
  std::sort(live.begin(), live.end());
  EXPECT_EQ(alloc->PoolLiveBlocks(kPool), live);
  // Memory that is in use, outside the pool's heap, or in the default pool: refused.
  EXPECT_FALSE(alloc->AllocateAt(keep, kMiB, kS1, kPool).ok());
  EXPECT_FALSE(alloc->AllocateAt(large, 3 * kMiB, kS2, kPool).ok());
  EXPECT_FALSE(alloc->AllocateAt(large, 3 * kMiB, kS1, kDefaultPool).ok());
  for (DevicePtr p : live) alloc->Free(p);
  alloc->ReleasePool(kPool);
  EXPECT_EQ(alloc->stats().reserved_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(ThreadCaches, PoolTest, ::testing::Bool());

TEST(CaptureTest, MakesNoDeviceCallThatBreaksACaptureAndGrowsFromNewPages) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim);
  alloc->Free(*alloc->Allocate(8 * kMiB, kS1));
  alloc->Free(*alloc->Allocate(3 * kMiB, kS2));
  alloc->BeginCapture();
  const BackendCounters before = sim.counters();
  const std::size_t events = sim.live_events();
  std::vector<DevicePtr> blocks;
  for (std::size_t size : {20 * kMiB, 4096 * std::size_t{1}, 9 * kMiB, 64 * kMiB}) {
    auto p = alloc->AllocateInPool(size, kS1, kPool);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(sim.IsAccessible(*p, size));
    blocks.push_back(*p);
  }
  alloc->Free(blocks[0]);
  alloc->EmptyCache();
  alloc->EmptyPoolCache(kDefaultPool);
  const BackendCounters after = sim.counters();
  EXPECT_EQ(after.synchronizes, before.synchronizes);
  EXPECT_EQ(after.unmaps, before.unmaps);
  EXPECT_EQ(after.physical_releases, before.physical_releases);
  EXPECT_GT(after.maps, before.maps);
  EXPECT_EQ(sim.live_events(), events);
  alloc->EndCapture();
  for (std::size_t i = 1; i < blocks.size(); ++i) alloc->Free(blocks[i]);
}

TEST(CaptureTest, ARequestThatNeedsStitchingFailsWithoutTrimming) {
  SimBackend sim({.capacity = 8 * kPage});
  auto alloc = MakeCachingAllocator(sim);
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(*alloc->Allocate(2 * kPage, kS1));
  alloc->Free(blocks[0]);
  alloc->Free(blocks[2]);
  alloc->BeginCapture();
  const BackendCounters before = sim.counters();
  EXPECT_FALSE(alloc->Allocate(4 * kPage, kS1).ok());
  EXPECT_EQ(sim.counters().synchronizes, before.synchronizes);
  EXPECT_EQ(sim.counters().unmaps, before.unmaps);
  EXPECT_EQ(sim.counters().physical_bytes, before.physical_bytes);
  alloc->EndCapture();
  EXPECT_TRUE(alloc->Allocate(4 * kPage, kS1).ok());  // stitched now
}

TEST(CaptureTest, ACrossStreamFreeWaitsForTheEndOfTheCapture) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim);
  DevicePtr x = *alloc->Allocate(8 * kMiB, kS1);
  ASSERT_TRUE(alloc->RecordStream(x, kS2));
  alloc->BeginCapture();
  alloc->BeginCapture();  // nested
  alloc->Free(x);
  EXPECT_EQ(sim.live_events(), 0u);
  EXPECT_FALSE(alloc->Owns(x));
  DevicePtr y = *alloc->Allocate(8 * kMiB, kS1);
  EXPECT_NE(y, x);
  DetailedStats d = alloc->detailed_stats();
  EXPECT_EQ(d.active[0].current, 2);
  EXPECT_EQ(d.allocation[0].current, 1);
  alloc->EndCapture();
  EXPECT_EQ(sim.live_events(), 0u);  // still inside the outer capture
  alloc->EndCapture();
  EXPECT_EQ(sim.live_events(), 1u);  // the free now waits for an event on kS2
  alloc->Free(y);
  sim.CompleteStream(kS2);
  EXPECT_EQ(*alloc->Allocate(16 * kMiB, kS1) != 0, true);
  EXPECT_EQ(alloc->detailed_stats().active[0].current, 1);  // x went back
}

TEST(OomTest, ARequestBeyondTheDeviceCreatesAndMapsNothing) {
  SimBackend sim({.capacity = 64 * kMiB});
  auto alloc = MakeCachingAllocator(sim);
  DevicePtr a = *alloc->Allocate(40 * kMiB, kS1);
  const BackendCounters before = sim.counters();
  EXPECT_FALSE(alloc->Allocate(128 * kMiB, kS1).ok());  // twice the device
  EXPECT_FALSE(alloc->Allocate(30 * kMiB, kS1).ok());   // past what live blocks leave
  const BackendCounters after = sim.counters();
  EXPECT_EQ(after.physical_creates, before.physical_creates);
  EXPECT_EQ(after.maps, before.maps);
  EXPECT_EQ(after.unmaps, before.unmaps);
  EXPECT_EQ(after.synchronizes, before.synchronizes);
  EXPECT_EQ(alloc->stats().oom_count, 2u);
  EXPECT_EQ(alloc->detailed_stats().num_ooms, 2);
  alloc->Free(a);
}

TEST(OomTest, AGrowthRefusedHalfWayLeavesReservedAsItWas) {
  // The device claims more than it gives (shared with other processes): pages run out
  // in the middle of a growth.
  SimBackend sim({.capacity = 8 * kPage});
  testing::CheckedBackend device(sim);
  device.claimed_capacity = 64 * kPage;
  auto alloc = MakeCachingAllocator(device);
  DevicePtr a = *alloc->Allocate(4 * kPage, kS1);
  const std::uint64_t before = alloc->stats().reserved_bytes;
  EXPECT_FALSE(alloc->Allocate(6 * kPage, kS2).ok());
  EXPECT_EQ(alloc->stats().reserved_bytes, before);
  EXPECT_EQ(sim.counters().physical_bytes, before);
  EXPECT_GT(sim.counters().physical_releases, 0u);  // pages created for it went back
  alloc->Free(a);
  EXPECT_FALSE(alloc->Allocate(9 * kPage, kS2).ok());  // after trimming, the same
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_TRUE(alloc->Allocate(8 * kPage, kS2).ok());
}

TEST(OomTest, ABatchSizeFinderEndsWithReservedNearItsWorkingSet) {
  SimBackend sim({.capacity = std::uint64_t{1} << 30});
  auto alloc = MakeCachingAllocator(sim);
  DevicePtr weights = *alloc->Allocate(200 * kMiB, kS1);
  std::size_t batch = 64;
  std::vector<DevicePtr> acts;
  for (;;) {
    bool ok = true;
    for (std::size_t i = 0; i < batch && ok; ++i) {
      auto p = alloc->Allocate(16 * kMiB + 4096, kS1);
      ok = p.ok();
      if (ok) acts.push_back(*p);
    }
    if (ok) break;
    for (DevicePtr p : acts) alloc->Free(p);
    acts.clear();
    alloc->EmptyCache();  // as the finders do after an OOM
    EXPECT_LE(sim.counters().physical_bytes, 200 * kMiB + kPage);
    batch /= 2;
  }
  EXPECT_EQ(batch, 32u);
  const std::uint64_t working = 200 * kMiB + batch * (16 * kMiB + 4096);
  EXPECT_LE(sim.counters().physical_bytes, working + 4 * kPage);
  for (DevicePtr p : acts) alloc->Free(p);
  alloc->Free(weights);
}

class DetailedStatsTest : public ::testing::TestWithParam<bool> {};

std::int64_t I(std::uint64_t v) { return static_cast<std::int64_t>(v); }

void ExpectStat(const Stat& s, std::int64_t current, std::int64_t peak, std::int64_t allocated,
                std::int64_t freed, const char* what) {
  EXPECT_EQ(s.current, current) << what;
  EXPECT_EQ(s.peak, peak) << what;
  EXPECT_EQ(s.allocated, allocated) << what;
  EXPECT_EQ(s.freed, freed) << what;
}

TEST_P(DetailedStatsTest, ExactOnAScriptedSequence) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim, WithCaches(GetParam()));
  const std::uint64_t c_bytes = 3 * kMiB + 7;
  DevicePtr a = *alloc->Allocate(1000, kS1);
  DevicePtr b = *alloc->Allocate(3000, kS1);
  DevicePtr c = *alloc->Allocate(c_bytes, kS1);
  DevicePtr d = *alloc->Allocate(5 * kMiB, kS1);
  alloc->Free(a);
  DevicePtr e = *alloc->Allocate(1000, kS1);
  alloc->Free(c);
  DetailedStats s = alloc->detailed_stats();
  const std::int64_t peak_bytes = I(4000 + c_bytes + 5 * kMiB);
  ExpectStat(s.allocation[0], 3, 4, 5, 2, "allocation all");
  ExpectStat(s.allocation[1], 2, 2, 3, 1, "allocation small");
  ExpectStat(s.allocation[2], 1, 2, 2, 1, "allocation large");
  ExpectStat(s.allocated_bytes[0], I(4000 + 5 * kMiB), peak_bytes, I(5000 + c_bytes + 5 * kMiB),
             I(1000 + c_bytes), "bytes all");
  ExpectStat(s.allocated_bytes[1], 4000, 4000, 5000, 1000, "bytes small");
  ExpectStat(s.allocated_bytes[2], I(5 * kMiB), I(c_bytes + 5 * kMiB), I(c_bytes + 5 * kMiB),
             I(c_bytes), "bytes large");
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(s.active[k].current, s.allocation[k].current);
    EXPECT_EQ(s.active_bytes[k].peak, s.allocated_bytes[k].peak);
    EXPECT_EQ(s.requested_bytes[k].current, s.allocated_bytes[k].current);
  }
  // Reserved: slabs of two classes are the small part.
  const std::uint64_t slabs = SizeClasses::SlabBytes(SizeClasses::ClassOf(1000)) +
                              SizeClasses::SlabBytes(SizeClasses::ClassOf(3000));
  const BackendCounters bc = sim.counters();
  EXPECT_EQ(s.reserved_bytes[0].current, I(bc.physical_bytes));
  EXPECT_EQ(s.reserved_bytes[0].allocated, I(bc.physical_bytes));
  EXPECT_EQ(s.reserved_bytes[1].current, I(slabs));
  EXPECT_EQ(s.reserved_bytes[2].current, I(bc.physical_bytes - slabs));
  EXPECT_EQ(s.segment[1].current, 2);
  EXPECT_EQ(s.segment[0].current, s.segment[1].current + s.segment[2].current);
  EXPECT_EQ(s.num_device_alloc, I(bc.physical_creates));
  EXPECT_EQ(s.num_device_free, 0);

  alloc->ResetAccumulated();
  alloc->ResetPeaks();
  s = alloc->detailed_stats();
  ExpectStat(s.allocation[0], 3, 3, 0, 0, "allocation after resets");
  ExpectStat(s.allocated_bytes[1], 4000, 4000, 0, 0, "small bytes after resets");
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.reserved_bytes[0].allocated, 0);

  // d waits for kS2 after its free: it stays active. The next block peaks active.
  ASSERT_TRUE(alloc->RecordStream(d, kS2));
  alloc->Free(d);
  DevicePtr f = *alloc->Allocate(6 * kMiB, kS1);
  s = alloc->detailed_stats();
  ExpectStat(s.allocation[0], 3, 3, 1, 1, "allocation with d pending");
  ExpectStat(s.active[0], 4, 4, 1, 0, "active with d pending");
  ExpectStat(s.active[2], 2, 2, 1, 0, "active large with d pending");
  ExpectStat(s.active_bytes[0], I(4000 + 11 * kMiB), I(4000 + 11 * kMiB), I(6 * kMiB), 0,
             "active bytes with d pending");
  ExpectStat(s.allocated_bytes[0], I(4000 + 6 * kMiB), I(4000 + 6 * kMiB), I(6 * kMiB),
             I(5 * kMiB), "bytes with d pending");
  sim.CompleteStream(kS2);
  alloc->Free(*alloc->Allocate(1000, kS1));  // collects d
  s = alloc->detailed_stats();
  ExpectStat(s.active[0], 3, 4, 2, 2, "active once d went back");
  for (DevicePtr p : {b, e, f}) alloc->Free(p);
  s = alloc->detailed_stats();
  EXPECT_EQ(s.allocation[0].current, 0);
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.active_bytes[0].current, 0);
}

INSTANTIATE_TEST_SUITE_P(ThreadCaches, DetailedStatsTest, ::testing::Bool());

TEST(DetailedStatsTest, CountsRetriesAndDeviceFrees) {
  SimBackend sim({.capacity = 8 * kPage});
  auto alloc = MakeCachingAllocator(sim);
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*alloc->Allocate(kPage, kS1));
  for (int i = 0; i < 8; i += 2) alloc->Free(blocks[i]);
  EXPECT_TRUE(alloc->Allocate(4 * kPage, kS1).ok());  // stitched
  DetailedStats s = alloc->detailed_stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  alloc->EmptyCache();
  s = alloc->detailed_stats();
  EXPECT_EQ(s.num_device_free, I(sim.counters().physical_releases));
}

// Every segment is covered by its blocks; allocated blocks are exactly the live ones.
void CheckLayout(const std::vector<LayoutSegment>& layout,
                 const std::vector<std::pair<DevicePtr, std::size_t>>& live) {
  std::size_t found = 0;
  DevicePtr last_end = 0;
  for (const LayoutSegment& seg : layout) {
    EXPECT_GE(seg.address, last_end);
    last_end = seg.address + seg.total_size;
    std::size_t total = 0, allocated = 0, requested = 0;
    DevicePtr at = seg.address;
    for (const LayoutBlock& b : seg.blocks) {
      EXPECT_EQ(b.address, at);
      at += b.size;
      total += b.size;
      if (b.state != LayoutBlock::kAllocated) continue;
      allocated += b.size;
      requested += b.requested;
      auto it = std::find_if(live.begin(), live.end(),
                             [&](const auto& l) { return l.first == b.address; });
      ASSERT_NE(it, live.end()) << b.address;
      EXPECT_EQ(b.requested, it->second);
      EXPECT_GE(b.size, b.requested);
      ++found;
    }
    EXPECT_EQ(total, seg.total_size);
    EXPECT_EQ(allocated, seg.allocated_size);
    EXPECT_EQ(requested, seg.requested_size);
  }
  EXPECT_EQ(found, live.size());
}

TEST(LayoutTest, SegmentsAreCoveredByTheirBlocks) {
  for (bool caches : {false, true}) {
    SimBackend sim({.events = SimBackendOptions::Events::kManual});
    auto alloc = MakeCachingAllocator(sim, WithCaches(caches));
    std::vector<std::pair<DevicePtr, std::size_t>> live;
    for (std::size_t size : {std::size_t{1000}, std::size_t{3000}, std::size_t{1000},
                             3 * kMiB + 7, 5 * kMiB, 9 * kMiB}) {
      live.emplace_back(*alloc->Allocate(size, kS1), size);
    }
    live.emplace_back(*alloc->AllocateInPool(4 * kMiB, kS2, kPool), 4 * kMiB);
    alloc->Free(live[2].first);  // a small block back in its slab (or a cache)
    alloc->Free(live[3].first);
    ASSERT_TRUE(alloc->RecordStream(live[4].first, kS2));
    alloc->Free(live[4].first);  // pending
    const DevicePtr pending = live[4].first;
    live.erase(live.begin() + 2, live.begin() + 5);
    const std::vector<LayoutSegment> layout = alloc->Layout();
    CheckLayout(layout, live);
    std::size_t small = 0, total = 0;
    bool saw_pending = false, saw_pool = false;
    for (const LayoutSegment& seg : layout) {
      small += seg.is_small;
      total += seg.total_size;
      saw_pool |= seg.pool == kPool && seg.stream == kS2 && seg.allocated_size == 4 * kMiB;
      for (const LayoutBlock& b : seg.blocks) {
        saw_pending |= b.address == pending && b.state == LayoutBlock::kPendingFree;
      }
    }
    EXPECT_EQ(small, 2u) << caches;
    EXPECT_TRUE(saw_pending) << caches;
    EXPECT_TRUE(saw_pool) << caches;
    EXPECT_EQ(total, sim.counters().mapped_bytes) << caches;
    sim.CompleteStream(kS2);
  }
}

TEST(LayoutTest, SegmentsWithoutVmm) {
  SimBackend sim({.vmm = false});
  auto alloc = MakeCachingAllocator(sim);
  std::vector<std::pair<DevicePtr, std::size_t>> live;
  for (std::size_t size : {std::size_t{100}, 3 * kMiB, 7 * kMiB}) {
    live.emplace_back(*alloc->Allocate(size, kS1), size);
  }
  const std::vector<LayoutSegment> layout = alloc->Layout();
  CheckLayout(layout, live);
  std::size_t total = 0;
  for (const LayoutSegment& seg : layout) total += seg.total_size;
  EXPECT_EQ(total, sim.counters().segment_bytes);
}

TEST(OwnershipTest, FreeIfOwnedTellsItsOwnBlocks) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim);
  auto b = MakeCachingAllocator(sim);
  DevicePtr p = *a->Allocate(4 * kMiB, kS1);
  EXPECT_TRUE(a->Owns(p));
  EXPECT_FALSE(b->Owns(p));
  EXPECT_FALSE(b->FreeIfOwned(p));
  EXPECT_TRUE(a->FreeIfOwned(p));
  EXPECT_FALSE(a->FreeIfOwned(p));
}

}  // namespace
}  // namespace gpumem
