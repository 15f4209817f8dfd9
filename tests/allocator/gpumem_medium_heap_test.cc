// The medium heap (CachingAllocatorOptions::medium_limit): blocks above the slabs' sizes
// and up to the limit, and the slabs, come from a heap of their own per stream.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/sim_backend.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

CachingAllocatorOptions WithMediumHeap(bool on) {
  return {.medium_limit = on ? kMiB : 0};
}

bool InPagesOf(DevicePtr p, DevicePtr block, std::size_t bytes) {
  const DevicePtr first = block / kPage * kPage;
  const DevicePtr end = (block + bytes + kPage - 1) / kPage * kPage;
  return p >= first && p < end;
}

// An 8 MiB block, freed, leaves four free pages: without a medium heap a 512 KiB block
// and a slab are cut from them; with it, they come from elsewhere.
TEST(MediumHeapTest, MediumBlocksAndSlabsComeFromAHeapOfTheirOwn) {
  for (bool medium : {false, true}) {
    SimBackend sim;
    auto alloc = MakeCachingAllocator(sim, WithMediumHeap(medium));
    const DevicePtr large = *alloc->Allocate(8 * kMiB, kS1);
    alloc->Free(large);
    const DevicePtr mid = *alloc->Allocate(512 << 10, kS1);
    const DevicePtr small = *alloc->Allocate(4096, kS1);
    EXPECT_EQ(InPagesOf(mid, large, 8 * kMiB), !medium) << "medium heap " << medium;
    EXPECT_EQ(InPagesOf(small, large, 8 * kMiB), !medium) << "medium heap " << medium;
    // Above the limit: the large heap's.
    EXPECT_TRUE(InPagesOf(*alloc->Allocate(kMiB + 512, kS1), large, 8 * kMiB));
  }
}

// A 3 MiB block leaves half of its second page free, a piece smaller than a page: a
// medium block that its own heap cannot fit fills it, and goes back to the large heap at
// its free. A slab does not (its slots are the medium heap's).
TEST(MediumHeapTest, MediumBlocksFillPiecesOfTheLargeHeapSmallerThanAPage) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, WithMediumHeap(true));
  const DevicePtr large = *alloc->Allocate(3 * kMiB, kS1);
  const std::uint64_t reserved = alloc->stats().reserved_bytes;
  const DevicePtr mid = *alloc->Allocate(512 << 10, kS1);
  EXPECT_TRUE(InPagesOf(mid, large, 3 * kMiB));
  const DevicePtr small = *alloc->Allocate(4096, kS1);
  EXPECT_FALSE(InPagesOf(small, large, 3 * kMiB));
  alloc->Free(mid);
  alloc->Free(large);
  // The large heap's two pages are one free block again: both idle.
  const std::uint64_t slabs = alloc->stats().reserved_bytes - reserved;
  alloc->EmptyCache();
  EXPECT_EQ(alloc->stats().reserved_bytes, slabs);
}

// A piece of S1's large heap that S2 borrowed and freed is fenced by an event on S2,
// not yet complete: a medium block that takes the piece makes S1 wait for it first.
TEST(MediumHeapTest, APieceOfTheLargeHeapWaitsForItsFences) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim, WithMediumHeap(true));
  const DevicePtr large = *alloc->Allocate(5 * kMiB / 2, kS1);
  alloc->Free(*alloc->Allocate(5 * kMiB / 4, kS1));  // a 1.5 MiB piece in the second page
  const DevicePtr borrowed = *alloc->Allocate(5 * kMiB / 4, kS2);
  ASSERT_EQ(alloc->stats().cross_stream_borrows, 1u);
  alloc->Free(borrowed);
  const std::uint64_t waits = sim.counters().stream_waits;
  const DevicePtr mid = *alloc->Allocate(512 << 10, kS1);
  EXPECT_TRUE(InPagesOf(mid, large, 5 * kMiB / 2));
  EXPECT_EQ(sim.counters().stream_waits, waits + 1);
}

// Each pass allocates a matrix while the last one is still live, frees the last one and
// keeps a medium block (a k-means loop's nearest distances). In the large heap each kept
// block lands in a matrix's partly used page, and pins it once the matrix goes; in a
// heap of their own they share pages with one another.
TEST(MediumHeapTest, KeptMediumBlocksPinNoPagesOfLargeOnes) {
  constexpr int kPasses = 100;
  constexpr std::size_t kMatrix = 5 * kMiB + kMiB / 2;
  constexpr std::size_t kKept = 800 * 1000;
  std::uint64_t reserved[2] = {};
  for (bool medium : {false, true}) {
    SimBackend sim;
    // The budget's share of the peak alone (no floor of pages): what the pinned pages cost.
    CachingAllocatorOptions options = WithMediumHeap(medium);
    options.min_budget_pages = 0;
    auto alloc = MakeCachingAllocator(sim, options);
    DevicePtr matrix = 0;
    for (int i = 0; i < kPasses; ++i) {
      const DevicePtr next = *alloc->Allocate(kMatrix, kS1);
      if (matrix != 0) alloc->Free(matrix);
      matrix = next;
      ASSERT_TRUE(alloc->Allocate(kKept, kS1).ok());
    }
    reserved[medium] = alloc->stats().peak_reserved_bytes;
  }
  const std::uint64_t needed = 2 * kMatrix + kPasses * kKept;
  std::printf("peak reserved / needed: without a medium heap %.3f, with %.3f\n",
              static_cast<double>(reserved[0]) / needed,
              static_cast<double>(reserved[1]) / needed);
  EXPECT_LE(reserved[1], needed + 3 * kPage);
  EXPECT_GT(reserved[0], needed + 3 * kPage);
}

// S1 frees a medium block (the rest of its page used) and a large one. S2 borrows S1's free medium block for a medium
// request, but never a piece of S1's large one: that would put it back beside large
// blocks.
TEST(MediumHeapTest, StreamsBorrowOnlyFromHeapsOfTheSameKind) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim, WithMediumHeap(true));
  const DevicePtr mid = *alloc->Allocate(kMiB, kS1);
  ASSERT_TRUE(alloc->Allocate(kMiB, kS1).ok());  // the rest of its page
  const DevicePtr large = *alloc->Allocate(8 * kMiB, kS1);
  alloc->Free(mid);
  alloc->Free(large);
  EXPECT_EQ(*alloc->Allocate(kMiB, kS2), mid);
  EXPECT_EQ(alloc->stats().cross_stream_borrows, 1u);
  const DevicePtr other = *alloc->Allocate(kMiB, kS2);
  EXPECT_FALSE(other >= large && other < large + 8 * kMiB);
  EXPECT_EQ(alloc->stats().cross_stream_borrows, 1u);
}

// On an 8 MiB device whose medium heap holds two idle pages, an 8 MiB block needs them:
// they are lent as the large heap's own would be, in stream order, with no stream wait.
TEST(MediumHeapTest, TheStreamsOtherHeapLendsItsIdlePagesWithoutAWait) {
  SimBackend sim({.capacity = 8 * kMiB, .events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim, WithMediumHeap(true));
  std::vector<DevicePtr> mids;
  for (int i = 0; i < 4; ++i) mids.push_back(*alloc->Allocate(kMiB, kS1));
  for (DevicePtr p : mids) alloc->Free(p);
  ASSERT_TRUE(alloc->Allocate(8 * kMiB, kS1).ok());
  EXPECT_EQ(alloc->stats().stitch_count, 1u);
  EXPECT_EQ(alloc->stats().cross_stream_lends, 0u);
  EXPECT_EQ(sim.counters().stream_waits, 0u);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
}

// A steady loop whose medium blocks and large block peak at different moments: four
// 1 MiB blocks, freed, then a 20 MiB block, freed. Apart, the two heaps need 24 MiB,
// beyond a budget of 1.75 % over the 20 MiB peak: measured against that peak, each step
// would move pages from one heap to the other and back. Against the kinds' peaks, the
// steps after the first stitch nothing.
TEST(MediumHeapTest, GrowthBudgetCountsEachKindsPeak) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, WithMediumHeap(true));
  std::uint64_t stitches_after_first = 0;
  for (int step = 0; step < 10; ++step) {
    std::vector<DevicePtr> mids;
    for (int i = 0; i < 4; ++i) mids.push_back(*alloc->Allocate(kMiB, kS1));
    for (DevicePtr p : mids) alloc->Free(p);
    alloc->Free(*alloc->Allocate(20 * kMiB, kS1));
    if (step == 0) stitches_after_first = alloc->stats().stitch_count;
  }
  EXPECT_EQ(alloc->stats().stitch_count, stitches_after_first);
  EXPECT_EQ(sim.counters().unmaps, 0u);
  EXPECT_EQ(alloc->stats().reserved_bytes, 24 * kMiB);
}

}  // namespace
}  // namespace gpumem
