#include "allocator/large_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "allocator/page_heap.h"
#include "allocator/sim_backend.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

// Every mapped byte is in exactly one block and blocks never overlap.
void ExpectConsistent(const LargePool& pool, const SimBackend& sim) {
  std::size_t covered = 0;
  pool.ForEachBlock([&](const Block& b) {
    covered += b.size;
    EXPECT_TRUE(sim.IsAccessible(b.addr, b.size)) << "block at " << b.addr;
    if (b.next != nullptr) {
      EXPECT_LE(b.end(), b.next->addr);
    }
    if (b.prev != nullptr) {
      EXPECT_EQ(b.prev->next, &b);
    }
  });
  EXPECT_EQ(covered, sim.counters().mapped_bytes);
}

TEST(LargePoolTest, SplitsAndCoalesces) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  LargePool pool(heap, 64 * kPage);
  auto a = pool.Grow(pool.PlanGrowth(3 * kMiB), 3 * kMiB);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(sim.counters().physical_bytes, 2 * kPage);
  EXPECT_EQ(pool.free_bytes(), kMiB);  // the rest of the second page
  Block* b = pool.BestFit(512 * 1024);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pool.free_bytes(), kMiB / 2);
  pool.Free(*a);
  pool.Free(b);
  EXPECT_EQ(pool.free_bytes(), 2 * kPage);
  EXPECT_EQ(pool.largest_free(), 2 * kPage);  // one block again
  ExpectConsistent(pool, sim);
  EXPECT_EQ(pool.TakeIdlePages(100, nullptr), 2u);
  EXPECT_EQ(pool.range_count(), 0u);  // no page left: the range is released
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
}

// A range is reserved with room to grow; where the address space has no room for that,
// a range of the request's own size still serves it.
TEST(LargePoolTest, AFreshRangeWithoutRoomWhenTheAddressSpaceIsShort) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  constexpr std::size_t kTiB = std::size_t{1} << 40;
  LargePool pool(heap, 40 * kTiB);  // the simulated address space holds one such range
  Block* first = *pool.Grow(pool.PlanGrowth(4 * kPage), 4 * kPage);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 40 * kTiB);
  // Whole pages get a fresh range of their own.
  absl::StatusOr<Block*> second = pool.Grow(pool.PlanGrowth(8 * kPage), 8 * kPage);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(pool.range_count(), 2u);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 40 * kTiB + 8 * kPage);
  ExpectConsistent(pool, sim);
  pool.Free(first);
  pool.Free(*second);
  EXPECT_EQ(pool.TakeIdlePages(100, nullptr), 12u);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
}

// Blocks kept one after another each get a range of their own (room to grow in place
// once freed) until the pool holds kRangesBeforeSharing ranges; then the next ones go
// after the last used block of a range with room, reserving no more address space. Freed,
// they coalesce with their neighbours and their pages go back as usual.
TEST(LargePoolTest, KeptBlocksShareRangesOnceThePoolHoldsMany) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  LargePool pool(heap, 64 * kPage);
  constexpr std::size_t kRanges = LargePool::kRangesBeforeSharing;
  std::vector<Block*> kept;
  for (std::size_t i = 0; i < kRanges + 100; ++i) {
    absl::StatusOr<Block*> b = pool.Grow(pool.PlanGrowth(kPage), kPage);
    ASSERT_TRUE(b.ok()) << b.status();
    kept.push_back(*b);
  }
  EXPECT_EQ(pool.range_count(), kRanges);
  EXPECT_EQ(sim.counters().reserved_va_bytes, kRanges * 64 * kPage);
  EXPECT_EQ(kept[kRanges]->addr, kept[0]->end());  // after the first range's block
  EXPECT_EQ(kept[kRanges + 1]->addr, kept[kRanges]->end());
  // A request of pages and a bit: its rest of a page stays free at the range's end.
  absl::StatusOr<Block*> odd = pool.Grow(pool.PlanGrowth(kPage + kMiB), kPage + kMiB);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ((*odd)->addr, kept.back()->end());
  EXPECT_EQ(pool.free_bytes(), kPage - kMiB);
  EXPECT_EQ(pool.range_count(), kRanges);
  ExpectConsistent(pool, sim);
  pool.Free(*odd);
  for (Block* b : kept) pool.Free(b);
  EXPECT_EQ(pool.free_bytes(), sim.counters().mapped_bytes);
  EXPECT_EQ(pool.TakeIdlePages(100000, nullptr), kRanges + 102);
  EXPECT_EQ(pool.range_count(), 0u);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
}

// Two pools on one meter: what they hand out, carved (512 B rounded by the caller), by
// best fit, growth or at an address, and its peak across both.
TEST(LargePoolTest, MeterCountsWhatPoolsHandOutAndItsPeak) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  LargePool a(heap, 64 * kPage);
  LargePool b(heap, 64 * kPage);
  UsageMeter meter;
  a.set_meter(&meter);
  b.set_meter(&meter);
  Block* grown = *a.Grow(a.PlanGrowth(3 * kMiB), 3 * kMiB);
  Block* fit = a.BestFit(kMiB / 2);
  Block* other = *b.Grow(b.PlanGrowth(kPage), kPage);
  EXPECT_EQ(meter.bytes, 3 * kMiB + kMiB / 2 + kPage);
  const DevicePtr base = grown->addr;
  a.Free(grown);
  b.Free(other);
  EXPECT_EQ(meter.bytes, kMiB / 2);
  Block* at = a.CarveAt(base, kMiB);
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(meter.bytes, kMiB / 2 + kMiB);
  a.Free(fit);
  a.Free(at);
  EXPECT_EQ(meter.bytes, 0u);
  EXPECT_EQ(meter.peak, 3 * kMiB + kMiB / 2 + kPage);
}

TEST(LargePoolTest, BestFitPicksTheSmallestFreeBlockThatFits) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  LargePool pool(heap, 64 * kPage);
  // [4 MiB used][2 MiB][4 MiB used][6 MiB][4 MiB used] with the free ones freed later.
  std::vector<Block*> blocks;
  for (std::size_t size : {4 * kMiB, 2 * kMiB, 4 * kMiB, 6 * kMiB, 4 * kMiB}) {
    Block* b = pool.BestFit(size);
    if (b == nullptr) b = *pool.Grow(pool.PlanGrowth(size), size);
    blocks.push_back(b);
  }
  const DevicePtr two = blocks[1]->addr;
  const DevicePtr six = blocks[3]->addr;
  pool.Free(blocks[1]);
  pool.Free(blocks[3]);
  Block* small = pool.BestFit(kMiB);
  ASSERT_NE(small, nullptr);
  EXPECT_GE(small->addr, two);
  EXPECT_LT(small->addr, two + 2 * kMiB);
  Block* big = pool.BestFit(5 * kMiB);
  ASSERT_NE(big, nullptr);
  EXPECT_GE(big->addr, six);
  EXPECT_EQ(pool.BestFit(5 * kMiB), nullptr);
  ExpectConsistent(pool, sim);
}

TEST(LargePoolTest, GrowsInPlaceUsingThePartlyUsedPage) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  LargePool pool(heap, 64 * kPage);
  Block* a = *pool.Grow(pool.PlanGrowth(3 * kMiB), 3 * kMiB);  // 2 pages, 1 MiB free
  LargePool::Plan plan = pool.PlanGrowth(5 * kMiB);
  ASSERT_NE(plan.extent, nullptr);
  EXPECT_EQ(plan.pages(), 2u);  // 1 MiB + 2 pages hold 5 MiB
  Block* b = *pool.Grow(plan, 5 * kMiB);
  EXPECT_EQ(b->addr, a->end());  // contiguous with a: the shared page is used
  EXPECT_EQ(sim.counters().physical_bytes, 4 * kPage);
  ExpectConsistent(pool, sim);
}

// When growing a free block costs as many pages as a fresh range, the free block grows:
// its bytes join the new block instead of staying stranded at the old range's end.
// Requests of whole pages still get a fresh range, where they sit page-aligned.
TEST(LargePoolTest, AtEqualPagesGrowsAFreeBlockUnlessTheRequestIsWholePages) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  LargePool pool(heap, 64 * kPage);
  // 2 pages, the last 256 KiB of the second free: the range's partly used end.
  Block* a = *pool.Grow(pool.PlanGrowth(4 * kMiB - kMiB / 4), 4 * kMiB - kMiB / 4);
  ASSERT_EQ(pool.free_bytes(), kMiB / 4);

  // 4 MiB: a fresh range needs 2 pages, and so does the free 256 KiB (3.75 MiB more).
  LargePool::Plan whole = pool.PlanGrowth(4 * kMiB);
  EXPECT_EQ(whole.extent, nullptr);
  EXPECT_EQ(whole.pages(), 2u);

  // 3 MiB: 2 pages either way, so the free block grows.
  LargePool::Plan part = pool.PlanGrowth(3 * kMiB);
  ASSERT_NE(part.extent, nullptr);
  EXPECT_EQ(part.pages(), 2u);
  Block* b = *pool.Grow(part, 3 * kMiB);
  EXPECT_EQ(b->addr, a->end());  // starts in the shared page
  EXPECT_EQ(pool.range_count(), 1u);
  EXPECT_EQ(pool.free_bytes(), 4 * kPage - (4 * kMiB - kMiB / 4) - 3 * kMiB);
  ExpectConsistent(pool, sim);
}

TEST(LargePoolTest, IdlePagesAreUnmappedAndRemappedWhereNeeded) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  LargePool pool(heap, 64 * kPage);
  std::vector<Block*> blocks;
  for (int i = 0; i < 6; ++i) {
    Block* b = pool.BestFit(kPage);
    if (b == nullptr) b = *pool.Grow(pool.PlanGrowth(kPage), kPage);
    blocks.push_back(b);
  }
  // Free every other block: three idle pages, no two contiguous.
  for (int i = 0; i < 6; i += 2) pool.Free(blocks[i]);
  EXPECT_EQ(pool.IdlePages(), 3u);
  EXPECT_EQ(pool.BestFit(3 * kPage), nullptr);
  LargePool::Plan plan = pool.PlanGrowth(3 * kPage);
  heap.BeginSlowPath();
  EXPECT_EQ(pool.TakeIdlePages(plan.pages(), plan.extent), plan.pages());
  EXPECT_EQ(heap.cached_pages(), plan.pages());
  auto big = pool.Grow(plan, 3 * kPage);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(heap.cached_pages(), 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 6 * kPage);  // no new page
  EXPECT_TRUE(sim.IsAccessible((*big)->addr, 3 * kPage));
  ExpectConsistent(pool, sim);
}

// Taking a page out of a free block cuts off the bytes it shares with used neighbours'
// pages; a block that shares none gives its pages first, even when it is larger.
TEST(LargePoolTest, IdlePagesComeFirstFromBlocksThatStrandNothing) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  LargePool pool(heap, 64 * kPage);
  Block* whole = *pool.Grow(pool.PlanGrowth(12 * kMiB), 12 * kMiB);
  const DevicePtr base = whole->addr;
  pool.Free(whole);
  // [1 MiB used][3 MiB free: 1 MiB of page 0 + page 1][2 MiB used][4 MiB free: pages 3-4]
  // [2 MiB used]
  std::vector<Block*> blocks;
  for (std::size_t size : {1 * kMiB, 3 * kMiB, 2 * kMiB, 4 * kMiB, 2 * kMiB}) {
    blocks.push_back(pool.BestFit(size));
    ASSERT_NE(blocks.back(), nullptr);
  }
  ASSERT_EQ(blocks[1]->addr, base + kMiB);
  ASSERT_EQ(blocks[3]->addr, base + 3 * kPage);
  pool.Free(blocks[1]);
  pool.Free(blocks[3]);
  EXPECT_EQ(pool.StrandedBytes(blocks[1]), kMiB);
  EXPECT_EQ(pool.StrandedBytes(blocks[3]), 0u);
  heap.BeginSlowPath();
  EXPECT_EQ(pool.TakeIdlePages(1, nullptr), 1u);
  // Page 1 stays, so the 3 MiB free block stays whole; one of pages 3-4 went.
  EXPECT_TRUE(sim.IsAccessible(base + kPage, kPage));
  EXPECT_FALSE(sim.IsAccessible(base + 3 * kPage, 2 * kPage));
  EXPECT_EQ(pool.largest_free(), 3 * kMiB);
  ExpectConsistent(pool, sim);
}

TEST(LargePoolTest, SegmentsWithoutVmm) {
  SimBackend sim({.vmm = false});
  PageHeap heap(sim, 0, nullptr);
  LargePool pool(heap, 64 * kPage);
  auto a = pool.Grow(pool.PlanGrowth(3 * kMiB), 3 * kMiB);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(sim.counters().segment_bytes, 4 * kMiB);
  Block* b = pool.BestFit(kMiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pool.ReleaseFreeSegments(), 0u);  // still in use
  pool.Free(*a);
  pool.Free(b);
  EXPECT_EQ(pool.TakeIdlePages(10, nullptr), 0u);  // segments cannot be remapped
  EXPECT_EQ(pool.ReleaseFreeSegments(), 4 * kMiB);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
}

}  // namespace
}  // namespace gpumem
