#include "allocator/page_heap.h"

#include <gtest/gtest.h>

#include "allocator/fault_injecting_backend.h"
#include "allocator/page_size.h"
#include "allocator/sim_backend.h"
#include "tests/allocator/gpumem_checked_backend.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

// A device's default page: 1/8192 of it as a power of two, from one granule to 8 MiB.
TEST(DefaultPageBytesTest, AShareOfTheDeviceBetweenTheGranuleAndEightMiB) {
  constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
  constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
  struct Case {
    std::uint64_t capacity;
    std::size_t granularity;
    std::size_t page;
  };
  for (const Case& c : {Case{1 * kGiB, kPage, kPage}, Case{16 * kGiB, kPage, kPage},
                        Case{24 * kGiB, kPage, kPage}, Case{32 * kGiB, kPage, 4 * kMiB},
                        Case{40 * kGiB, kPage, 4 * kMiB}, Case{48 * kGiB, kPage, 4 * kMiB},
                        Case{64 * kGiB, kPage, 8 * kMiB},
                        Case{81559 * kMiB, kPage, 8 * kMiB},  // an H100 80GB
                        Case{141 * kGiB, kPage, 8 * kMiB},    // an H200: never past 8 MiB
                        Case{16 * kGiB, 4 * kMiB, 4 * kMiB},  // never below the granule
                        Case{80 * kGiB, 16 * kMiB, 16 * kMiB},
                        Case{80 * kGiB, 3 * kMiB, 3 * kMiB}}) {  // odd granule: itself
    EXPECT_EQ(DefaultPageBytes(c.capacity, c.granularity), c.page)
        << c.capacity / kMiB << " MiB, granule " << c.granularity / kMiB << " MiB";
  }
  // Plain cudaMalloc segments (no VMM) are rounded to the page: nothing to save there.
  EXPECT_EQ(DefaultPageBytes(80 * kGiB, kPage, /*vmm=*/false), kPage);
}

TEST(PageHeapTest, MapsCachesAndReusesPages) {
  SimBackend sim;
  PageHeap heap(sim, 0, nullptr);
  DevicePtr va = *heap.ReserveRange(8 * kPage);
  ASSERT_TRUE(heap.MapPages(va, 3).ok());
  EXPECT_TRUE(sim.IsAccessible(va, 3 * kPage));
  EXPECT_EQ(heap.reserved_bytes(), 3 * kPage);
  heap.BeginSlowPath();
  EXPECT_TRUE(heap.UnmapPage(va + kPage));
  EXPECT_EQ(heap.cached_pages(), 1u);
  EXPECT_FALSE(sim.IsAccessible(va + kPage, 1));
  // The cached page is used before a new one is created.
  ASSERT_TRUE(heap.MapPages(va + 5 * kPage, 2).ok());
  EXPECT_EQ(heap.cached_pages(), 0u);
  EXPECT_EQ(sim.counters().physical_creates, 4u);
  EXPECT_EQ(heap.reserved_bytes(), sim.counters().physical_bytes);
  heap.DropRange(va, 8 * kPage);
  heap.ReleaseCached();
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(heap.reserved_bytes(), 0u);
}

TEST(PageHeapTest, MappingIsAllOrNothingAtCapacity) {
  SimBackend sim({.capacity = 3 * kPage});
  PageHeap heap(sim, 0, nullptr);
  DevicePtr va = *heap.ReserveRange(8 * kPage);
  absl::Status s = heap.MapPages(va, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  // What was created for the failed request is released again: the device is as before.
  EXPECT_EQ(heap.cached_pages(), 0u);
  EXPECT_EQ(heap.reserved_bytes(), 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_releases, 3u);
  ASSERT_TRUE(heap.MapPages(va, 3).ok());
  EXPECT_EQ(heap.reserved_bytes(), 3 * kPage);
  heap.DropRange(va, 8 * kPage);
}

TEST(PageHeapTest, SynchronizesOncePerSlowPathBeforeUnmapping) {
  SimBackend sim;
  testing::CheckedBackend checked(sim);
  PageHeap heap(checked, 0, nullptr);
  DevicePtr va = *heap.ReserveRange(4 * kPage);
  ASSERT_TRUE(heap.MapPages(va, 4).ok());
  heap.BeginSlowPath();
  heap.UnmapPage(va);
  heap.UnmapPage(va + kPage);
  EXPECT_EQ(checked.synchronizations.load(), 1);
  heap.BeginSlowPath();  // new work may have been queued since
  heap.UnmapPage(va + 2 * kPage);
  EXPECT_EQ(checked.synchronizations.load(), 2);
  heap.UnmapPage(va + 3 * kPage);
  heap.ReleaseRange(va, 4 * kPage);
}

// A device that refuses unmaps: nothing is released under a mapping (SimBackend would
// abort), every page stays counted, and a later release, once the device agrees, returns
// the page and the range.
TEST(PageHeapTest, ARefusedUnmapKeepsThePageUntilALaterRelease) {
  SimBackend sim;
  FaultInjectingBackend faults(sim, /*seed=*/1);
  PageHeap heap(faults, 0, nullptr);
  DevicePtr va = *heap.ReserveRange(4 * kPage);
  ASSERT_TRUE(heap.MapPages(va, 2).ok());
  heap.BeginSlowPath();
  faults.set_rates({.unmap = 1});
  EXPECT_FALSE(heap.UnmapPage(va));
  EXPECT_EQ(heap.cached_pages(), 0u);
  EXPECT_TRUE(sim.IsAccessible(va, 2 * kPage));
  heap.DropRange(va, 4 * kPage);  // kept: its pages are still mapped
  heap.ReleaseCached();
  EXPECT_EQ(sim.counters().reserved_va_bytes, 4 * kPage);
  EXPECT_EQ(heap.reserved_bytes(), sim.counters().physical_bytes);
  EXPECT_EQ(heap.reserved_bytes(), 2 * kPage);
  faults.set_rates({});
  heap.ReleaseCached();
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(heap.reserved_bytes(), 0u);
}

// A lent page whose old address the device will not unmap is not released under it.
TEST(PageHeapTest, ALentPageStaysCachedWhileItsOldAddressIsMapped) {
  SimBackend sim;
  FaultInjectingBackend faults(sim, /*seed=*/1);
  PageHeap heap(faults, 0, nullptr);
  DevicePtr va = *heap.ReserveRange(4 * kPage);
  ASSERT_TRUE(heap.MapPages(va, 1).ok());
  heap.LendPage(va);
  EXPECT_EQ(heap.cached_pages(), 1u);
  faults.set_rates({.unmap = 1});
  EXPECT_FALSE(heap.RetireLent(va));
  heap.ReleaseCached();
  EXPECT_EQ(heap.cached_pages(), 1u);
  EXPECT_EQ(heap.lent_pages(), 1u);
  faults.set_rates({});
  heap.ReleaseCached();
  EXPECT_EQ(heap.cached_pages(), 0u);
  EXPECT_EQ(heap.lent_pages(), 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  heap.ReleaseRange(va, 4 * kPage);
}

TEST(PageHeapTest, SegmentsWithoutVmm) {
  SimBackend sim({.vmm = false});
  PageHeap heap(sim, 0, nullptr);
  EXPECT_FALSE(heap.vmm());
  DevicePtr seg = *heap.AllocateSegment(3 * kPage);
  EXPECT_EQ(heap.reserved_bytes(), 3 * kPage);
  heap.FreeSegment(seg, 3 * kPage);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
}

}  // namespace
}  // namespace gpumem
