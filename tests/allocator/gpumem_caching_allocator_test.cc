#include "allocator/caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "allocator/fault_injecting_backend.h"
#include "allocator/policies.h"
#include "allocator/sim_backend.h"
#include "tests/allocator/eventually.h"
#include "tests/allocator/gpumem_checked_backend.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

class Recorder : public AllocatorObserver {
 public:
  void OnEvent(const AllocatorEvent& e) override { events.push_back(e); }
  int Count(AllocatorEventKind kind) const {
    int n = 0;
    for (const AllocatorEvent& e : events) n += e.kind == kind;
    return n;
  }
  std::vector<AllocatorEvent> events;
};

TEST(CachingAllocatorTest, IsRegisteredAsGpumem) {
  SimBackend sim;
  auto a = MakePolicy("gpumem", sim);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->name(), "gpumem");
}

TEST(CachingAllocatorTest, AccountsExactlyAndEmptiesTheCache) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim);
  std::vector<DevicePtr> blocks;
  std::uint64_t total = 0;
  for (std::size_t size : {std::size_t{1}, std::size_t{0}, std::size_t{4000}, 100 * std::size_t{1024},
                           kMiB, 3 * kMiB + 7, 64 * kMiB}) {
    auto p = alloc->Allocate(size, kDefaultStream);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_NE(*p, 0u);
    EXPECT_EQ(*p % 512, 0u);
    EXPECT_TRUE(sim.IsAccessible(*p, size));
    blocks.push_back(*p);
    total += size;
  }
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.allocated_bytes, total);
  EXPECT_EQ(s.active_blocks, blocks.size());
  EXPECT_EQ(s.reserved_bytes, sim.counters().physical_bytes);
  EXPECT_GE(s.reserved_bytes, total);
  for (DevicePtr p : blocks) alloc->Free(p);
  s = alloc->stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.peak_allocated_bytes, total);
  EXPECT_EQ(s.free_count, blocks.size());
  EXPECT_GT(s.reserved_bytes, 0u);  // cached
  alloc->EmptyCache();
  EXPECT_EQ(alloc->stats().reserved_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
}

// An 8 MiB block and a 4 KiB one allocated on kS1 and freed: their addresses.
std::pair<DevicePtr, DevicePtr> FreeALargeAndASmallBlockOnS1(DeviceAllocator& alloc) {
  const DevicePtr large = *alloc.Allocate(8 * kMiB, kS1);
  const DevicePtr small = *alloc.Allocate(4096, kS1);
  alloc.Free(large);
  alloc.Free(small);
  return {large, small};
}

TEST(CachingAllocatorTest, ReusesAFreedBlockOnItsOwnStreamAtOnce) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim);
  const auto [a, small] = FreeALargeAndASmallBlockOnS1(*alloc);
  EXPECT_EQ(*alloc->Allocate(8 * kMiB, kS1), a);
  EXPECT_EQ(*alloc->Allocate(4096, kS1), small);
}

TEST(CachingAllocatorTest, AnotherStreamDoesNotGetAFreedBlockWhileWorkMayBeQueued) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim, {.borrow = false});
  const auto [a, small] = FreeALargeAndASmallBlockOnS1(*alloc);
  DevicePtr b = *alloc->Allocate(8 * kMiB, kS2);
  DevicePtr c = *alloc->Allocate(4096, kS2);
  EXPECT_TRUE(b + 8 * kMiB <= a || a + 8 * kMiB <= b);
  EXPECT_TRUE(c + 4096 <= small || small + 4096 <= c);
}

// A large block freed on S1 serves S2 where it is, no page moved; S2 first waits (on the
// device) for S1's work. Small blocks stay in their stream's slabs.
TEST(CachingAllocatorTest, AnotherStreamBorrowsAFreedBlockBehindAWait) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim);
  const auto [a, small] = FreeALargeAndASmallBlockOnS1(*alloc);
  const std::uint64_t maps = sim.counters().maps;
  EXPECT_EQ(*alloc->Allocate(8 * kMiB, kS2), a);
  EXPECT_EQ(sim.counters().stream_waits, 1u);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_EQ(sim.counters().maps, maps);
  EXPECT_EQ(alloc->stats().cross_stream_borrows, 1u);
  DevicePtr c = *alloc->Allocate(4096, kS2);
  EXPECT_TRUE(c + 4096 <= small || small + 4096 <= c);
}

// An 8 MiB block of S1's heap, borrowed by S2 and freed there: its address.
DevicePtr BorrowedByS2AndFreed(DeviceAllocator& alloc) {
  const DevicePtr a = *alloc.Allocate(8 * kMiB, kS1);
  alloc.Free(a);
  EXPECT_EQ(*alloc.Allocate(8 * kMiB, kS2), a);
  alloc.Free(a);
  return a;
}

// The borrowed block is back in S1's heap at its free, fenced by an event on S2: S1 gets
// it at once, no new memory, its stream waiting on the device for S2's work (the host runs
// ahead of the device, with many such blocks in flight). Its free counts at once.
TEST(CachingAllocatorTest, ABorrowedBlockIsBackAtOnceBehindAFence) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim, {.new_page_headroom = 1, .max_new_page_headroom = 1});
  const DevicePtr a = BorrowedByS2AndFreed(*alloc);
  EXPECT_EQ(alloc->stats().allocated_bytes, 0u);
  EXPECT_EQ(alloc->stats().active_blocks, 0u);
  const std::uint64_t physical = sim.counters().physical_bytes;
  EXPECT_EQ(*alloc->Allocate(8 * kMiB, kS1), a);
  EXPECT_EQ(sim.counters().physical_bytes, physical);
  EXPECT_EQ(alloc->stats().cross_stream_borrows, 1u);
  EXPECT_EQ(sim.counters().stream_waits, 2u);  // the borrow's, and S1's on S2's free
  EXPECT_EQ(sim.counters().synchronizes, 0u);
}

// Once S2's work ran, the fence goes (asked every eighth allocation, here S2's, which
// grow new pages): S1 reuses the block with no wait.
TEST(CachingAllocatorTest, AFenceWhoseWorkRanCostsNoWait) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim, {.new_page_headroom = 1, .max_new_page_headroom = 1});
  const DevicePtr a = BorrowedByS2AndFreed(*alloc);
  sim.CompleteStream(kS2);
  for (int i = 0; i < 8; ++i) alloc->Free(*alloc->Allocate(4096, kS2));
  EXPECT_EQ(*alloc->Allocate(8 * kMiB, kS1), a);
  EXPECT_EQ(sim.counters().stream_waits, 1u);  // the borrow's alone
  EXPECT_EQ(sim.live_events(), 0u);
}

// A borrower waits for the lender's work up to the block's last use there, not for all
// that the lender queued since: a block back from S2 and borrowed again waits on the
// event recorded at its first borrow, while one S1 used since gets a new one.
TEST(CachingAllocatorTest, ABorrowWaitsForTheLendersWorkUpToTheBlocksLastUse) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  testing::CheckedBackend checked(sim);
  std::vector<std::pair<StreamId, EventHandle>> recorded, waits;
  checked.on_record_event = [&](StreamId s, EventHandle e) { recorded.push_back({s, e}); };
  checked.on_stream_wait = [&](StreamId s, EventHandle e) { waits.push_back({s, e}); };
  auto alloc = MakeCachingAllocator(checked);
  const DevicePtr a = *alloc->Allocate(8 * kMiB, kS1);
  const DevicePtr b = *alloc->Allocate(16 * kMiB, kS1);
  alloc->Free(a);
  EXPECT_EQ(*alloc->Allocate(8 * kMiB, kS2), a);  // borrowed: S2 waits for S1's work
  ASSERT_EQ(recorded.size(), 1u);
  const EventHandle checkpoint = recorded[0].second;
  EXPECT_EQ(recorded[0].first, kS1);
  EXPECT_EQ(waits.back(), std::make_pair(kS2, checkpoint));
  alloc->Free(a);  // back in S1's heap behind a fence on S2
  EXPECT_EQ(*alloc->Allocate(8 * kMiB, kS2), a);  // S1 never used it since
  EXPECT_EQ(recorded.size(), 2u);                 // the fence's event alone
  EXPECT_EQ(waits.back(), std::make_pair(kS2, checkpoint));
  alloc->Free(b);  // S1's work up to now may touch b
  EXPECT_EQ(*alloc->Allocate(16 * kMiB, kS2), b);
  ASSERT_EQ(recorded.size(), 3u);
  EXPECT_EQ(recorded.back().first, kS1);
  EXPECT_EQ(waits.back(), std::make_pair(kS2, recorded.back().second));
  checked.on_record_event = nullptr;
  checked.on_stream_wait = nullptr;
}

// The lender's stream waiting for a fence leaves it up: another stream borrowing the rest
// of the fenced memory still waits for it (the lender's wait is queued on its stream
// after the event the borrower would otherwise rely on).
TEST(CachingAllocatorTest, ABorrowerWaitsForAFenceTheLenderWaitedFor) {
  constexpr StreamId kS3 = 3;
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  testing::CheckedBackend checked(sim);
  std::vector<std::pair<StreamId, EventHandle>> recorded, waits;
  checked.on_record_event = [&](StreamId s, EventHandle e) { recorded.push_back({s, e}); };
  checked.on_stream_wait = [&](StreamId s, EventHandle e) { waits.push_back({s, e}); };
  auto alloc = MakeCachingAllocator(checked, {.new_page_headroom = 1, .max_new_page_headroom = 1});
  const DevicePtr a = BorrowedByS2AndFreed(*alloc);
  ASSERT_EQ(recorded.back().first, kS2);
  const EventHandle fence = recorded.back().second;
  const DevicePtr front = *alloc->Allocate(4 * kMiB, kS1);  // S1 waits for the fence
  EXPECT_EQ(waits.back(), std::make_pair(kS1, fence));
  const DevicePtr rest = *alloc->Allocate(4 * kMiB, kS3);  // the fenced block's other half
  EXPECT_TRUE((front == a && rest == a + 4 * kMiB) || (rest == a && front == a + 4 * kMiB));
  EXPECT_NE(std::find(waits.begin(), waits.end(), std::make_pair(kS3, fence)), waits.end());
  checked.on_record_event = nullptr;
  checked.on_stream_wait = nullptr;
}

// A capture must not wait for an event recorded outside it: at its start the lender's
// stream waits for its fences, and what it hands out during the capture waits for none.
TEST(CachingAllocatorTest, ACaptureStartsWithTheFencesWaitedFor) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim);
  const DevicePtr a = BorrowedByS2AndFreed(*alloc);
  alloc->BeginCapture();
  EXPECT_EQ(sim.counters().stream_waits, 2u);  // the borrow's, and S1's on S2's free
  EXPECT_EQ(*alloc->Allocate(8 * kMiB, kS1), a);
  EXPECT_EQ(sim.counters().stream_waits, 2u);
  alloc->EndCapture();
}

// The allocator's end releases the events of fences still up.
TEST(CachingAllocatorTest, FencesStillUpAtTheEndLeaveNoEvent) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  {
    auto alloc = MakeCachingAllocator(sim);
    BorrowedByS2AndFreed(*alloc);
    EXPECT_GT(sim.live_events(), 0u);
  }
  EXPECT_EQ(sim.live_events(), 0u);
}

// Pages of two granules: ranges start on a page (the backend aligns to a granule only),
// growth maps whole 4 MiB pages, stitching moves them, and everything goes back.
TEST(CachingAllocatorTest, PagesLargerThanTheGranularity) {
  SimBackend sim({.capacity = 16 * kMiB, .address_offset = kPage});  // ranges off the page
  auto alloc = MakeCachingAllocator(
      sim, {.page_bytes = 4 * kMiB, .new_page_headroom = 0, .max_new_page_headroom = 0});
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(*alloc->Allocate(4 * kMiB, kS1));
    EXPECT_EQ(blocks.back() % (4 * kMiB), 0u);
  }
  EXPECT_EQ(sim.counters().physical_bytes, 16 * kMiB);
  EXPECT_EQ(sim.counters().physical_creates, 4u);
  alloc->Free(blocks[0]);
  alloc->Free(blocks[2]);
  absl::StatusOr<DevicePtr> both = alloc->Allocate(8 * kMiB, kS1);  // two idle pages
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(sim.IsAccessible(*both, 8 * kMiB));
  EXPECT_EQ(alloc->stats().stitch_count, 1u);
  EXPECT_EQ(sim.counters().physical_bytes, 16 * kMiB);
  for (DevicePtr p : {*both, blocks[1], blocks[3]}) alloc->Free(p);
  alloc->EmptyCache();
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
}

TEST(CachingAllocatorTest, RecordStreamDelaysReuseUntilTheOtherStreamRan) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim);
  DevicePtr a = *alloc->Allocate(8 * kMiB, kS1);
  alloc->RecordStream(a, kS2);
  alloc->Free(a);
  EXPECT_EQ(alloc->stats().allocated_bytes, 0u);
  DevicePtr b = *alloc->Allocate(8 * kMiB, kS1);
  EXPECT_NE(b, a);  // stream 2 may still read a
  sim.CompleteStream(kS2);
  alloc->Free(b);
  // Both are reusable now; the event was released.
  DevicePtr c = *alloc->Allocate(8 * kMiB, kS1);
  DevicePtr d = *alloc->Allocate(8 * kMiB, kS1);
  EXPECT_TRUE((c == a && d == b) || (c == b && d == a));
  EXPECT_EQ(sim.live_events(), 0u);
}

// A request that fits only once the work holding pending frees has run waits for the
// device instead of failing; so does one whose event queries fail (they answer "not yet").
TEST(CachingAllocatorTest, PendingFreesAreWaitedForBeforeAnOom) {
  for (const double failed_queries : {0.0, 1.0}) {
    SimBackend sim({.capacity = 64 * kMiB, .events = SimBackendOptions::Events::kManual});
    FaultInjectingBackend faults(sim, /*seed=*/1, {.event_query = failed_queries});
    auto alloc = MakeCachingAllocator(faults);
    DevicePtr a = *alloc->Allocate(40 * kMiB, kS1);
    alloc->RecordStream(a, kS2);
    alloc->Free(a);
    if (failed_queries > 0) sim.CompleteStream(kS2);  // done, but no query says so
    absl::StatusOr<DevicePtr> b = alloc->Allocate(40 * kMiB, kS1);
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(alloc->stats().oom_count, 0u);
    EXPECT_EQ(sim.live_events(), 0u);
  }
}

TEST(CachingAllocatorTest, OomReturnsAReportAndNeverAborts) {
  SimBackend sim({.capacity = 16 * kMiB});
  Recorder recorder;
  auto alloc = MakeCachingAllocator(sim, {.device = 3, .observer = &recorder});
  DevicePtr a = *alloc->Allocate(6 * kMiB, kS1);
  auto big = alloc->Allocate(20 * kMiB, kS1);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  OomReport r = alloc->last_oom();
  EXPECT_EQ(r.requested_bytes, 20 * kMiB);
  EXPECT_EQ(r.allocated_bytes, 6 * kMiB);
  EXPECT_EQ(r.reserved_bytes, sim.counters().physical_bytes);
  EXPECT_EQ(r.capacity_bytes, 16 * kMiB);
  EXPECT_EQ(alloc->stats().oom_count, 1u);
  EXPECT_EQ(recorder.Count(AllocatorEventKind::kOom), 1);
  EXPECT_EQ(recorder.events.back().device, 3);
  EXPECT_FALSE(alloc->Allocate(std::size_t{1} << 63, kS1).ok());  // absurd sizes too
  // Still usable afterwards.
  alloc->Free(a);
  EXPECT_TRUE(alloc->Allocate(16 * kMiB, kS1).ok());
}

TEST(CachingAllocatorTest, StitchesScatteredFreePagesWhenTheDeviceIsFull) {
  // Eight 2 MiB blocks fill the device; every other one is freed. 8 MiB fit only if the
  // four scattered free pages are remapped into one range.
  SimBackend sim({.capacity = 8 * kPage});
  Recorder recorder;
  auto alloc = MakeCachingAllocator(sim, {.observer = &recorder});
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*alloc->Allocate(kPage, kS1));
  for (int i = 0; i < 8; i += 2) alloc->Free(blocks[i]);
  auto big = alloc->Allocate(4 * kPage, kS1);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_TRUE(sim.IsAccessible(*big, 4 * kPage));
  for (int i = 1; i < 8; i += 2) EXPECT_TRUE(sim.IsAccessible(blocks[i], kPage));
  EXPECT_GE(alloc->stats().stitch_count, 1u);
  EXPECT_EQ(sim.counters().peak_physical_bytes, 8 * kPage);
  // One stream: its pages were lent, mapped at the new address while the old one stays
  // until the stream's work is done, so nothing waited for the device.
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_EQ(sim.counters().unmaps, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, 11 * kPage);  // a free page grew by three lent
  // Observers see the pages leave their old addresses at once, so a trace never counts
  // a page twice; the device unmaps them later, with no second event.
  EXPECT_EQ(recorder.Count(AllocatorEventKind::kUnmap), 3);
  EXPECT_EQ(recorder.Count(AllocatorEventKind::kMap), 8 + 3);
  alloc->EmptyCache();  // unmaps the old addresses
  EXPECT_EQ(sim.counters().mapped_bytes, 8 * kPage);
  EXPECT_EQ(sim.counters().unmaps, 3u);
  EXPECT_EQ(recorder.Count(AllocatorEventKind::kUnmap), 3);

}

// Eight 2 MiB blocks, every other one freed (four idle pages in four ranges), then 8 MiB:
// it grows one free block by three pages, which come from new pages or from the idle ones.
void GrowPastScatteredIdlePages(DeviceAllocator& alloc, std::vector<DevicePtr>* live) {
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*alloc.Allocate(kPage, kS1));
  for (int i = 0; i < 8; ++i) {
    if (i % 2 == 0) {
      alloc.Free(blocks[i]);
    } else {
      live->push_back(blocks[i]);
    }
  }
  auto big = alloc.Allocate(4 * kPage, kS1);
  ASSERT_TRUE(big.ok()) << big.status();
  live->push_back(*big);
}

// A buffer never trimmed, 8 MiB a step on a device of 160 GiB: the blocks fill the
// device, not the address space (a range of it each would need 20,000 reservations of
// 16 GiB, far past what the simulated device, like a GPU, has room for).
TEST(CachingAllocatorTest, ABufferNeverTrimmedFillsTheDeviceNotTheAddressSpace) {
  SimBackend sim({.capacity = 160 * kGiB});
  auto alloc = MakeCachingAllocator(sim);
  constexpr std::size_t kBlocks = 160 * 128;  // 8 MiB each
  for (std::size_t i = 0; i < kBlocks; ++i) {
    absl::StatusOr<DevicePtr> p = alloc->Allocate(8 * kMiB, kDefaultStream);
    ASSERT_TRUE(p.ok()) << "block " << i << ": " << p.status();
  }
  EXPECT_EQ(sim.counters().physical_bytes, 160 * kGiB);
  EXPECT_LE(sim.counters().reserved_va_bytes, 256 * 16 * kGiB);
  EXPECT_FALSE(alloc->Allocate(8 * kMiB, kDefaultStream).ok());  // the device is full
}

// Stitching unmaps, and an unmap waits for the device; within the headroom over the peak
// allocated, new pages are cheaper.
TEST(CachingAllocatorTest, GrowsWithNewPagesWithinTheHeadroom) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, {.new_page_headroom = 0.5, .max_new_page_headroom = 0.5});
  std::vector<DevicePtr> live;
  GrowPastScatteredIdlePages(*alloc, &live);
  EXPECT_EQ(sim.counters().unmaps, 0u);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_EQ(alloc->stats().stitch_count, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 11 * kPage);
}

TEST(CachingAllocatorTest, StitchesPastTheHeadroom) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim, {.new_page_headroom = 0, .max_new_page_headroom = 0});
  std::vector<DevicePtr> live;
  GrowPastScatteredIdlePages(*alloc, &live);
  EXPECT_EQ(sim.counters().unmaps, 0u);        // lent: unmapped at a later slow path
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_EQ(alloc->stats().stitch_count, 1u);
  EXPECT_EQ(sim.counters().physical_bytes, 8 * kPage);
}

// A stitch within one stream lends its pages; their old addresses are unmapped once an
// event says the stream's work is done, at a later slow path, never by synchronizing.
TEST(CachingAllocatorTest, LentPagesAreUnmappedOnceTheirStreamRan) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  testing::CheckedBackend checked(sim);
  EventHandle before = 0;
  checked.on_unmap = [&](DevicePtr, std::size_t) { EXPECT_TRUE(sim.EventCompleted(before)); };
  auto alloc = MakeCachingAllocator(checked, {.new_page_headroom = 0, .max_new_page_headroom = 0});
  std::vector<DevicePtr> live;
  before = sim.RecordEvent(kS1);  // stands for the work that used the freed blocks
  GrowPastScatteredIdlePages(*alloc, &live);
  EXPECT_EQ(sim.counters().mapped_bytes, 11 * kPage);  // 3 pages at two addresses
  EXPECT_EQ(sim.counters().physical_bytes, 8 * kPage);
  ASSERT_TRUE(alloc->Allocate(64 * kMiB, kS1).ok());  // a slow path: the stream has not run
  EXPECT_EQ(sim.counters().unmaps, 0u);
  sim.CompleteStream(kS1);
  ASSERT_TRUE(alloc->Allocate(64 * kMiB, kS1).ok());  // the next slow path retires them
  EXPECT_EQ(sim.counters().unmaps, 3u);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, (8 + 64) * kPage);
  checked.on_unmap = nullptr;  // the allocator's teardown unmaps the rest
  sim.ReleaseEvent(before);
}

// With background_unmap the old addresses are unmapped on the unmapper's thread, once
// the event says the stream's work is done, without waiting for a later slow path; that
// slow path only collects what it did.
TEST(CachingAllocatorTest, LentPagesAreUnmappedOffThreadOnceTheirStreamRan) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  testing::CheckedBackend checked(sim);
  EventHandle before = 0;
  const std::thread::id allocating = std::this_thread::get_id();
  std::atomic<int> off_thread{0};
  checked.on_unmap = [&](DevicePtr, std::size_t) {
    EXPECT_TRUE(sim.EventCompleted(before));
    if (std::this_thread::get_id() != allocating) ++off_thread;
  };
  auto alloc = MakeCachingAllocator(
      checked, {.background_unmap = true, .new_page_headroom = 0, .max_new_page_headroom = 0});
  std::vector<DevicePtr> live;
  before = sim.RecordEvent(kS1);  // stands for the work that used the freed blocks
  GrowPastScatteredIdlePages(*alloc, &live);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(sim.counters().unmaps, 0u);  // the stream has not run
  sim.CompleteStream(kS1);
  EXPECT_TRUE(testing::Eventually([&] { return sim.counters().unmaps == 3; }));
  EXPECT_EQ(off_thread.load(), 3);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, 8 * kPage);
  // The next slow path collects them: the old addresses are holes again, and growth
  // may map there.
  absl::StatusOr<DevicePtr> more = alloc->Allocate(64 * kMiB, kS1);
  ASSERT_TRUE(more.ok());
  live.push_back(*more);
  EXPECT_EQ(sim.counters().mapped_bytes, (8 + 32) * kPage);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  checked.on_unmap = nullptr;
  for (DevicePtr p : live) alloc->Free(p);
  alloc->EmptyCache();
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  sim.ReleaseEvent(before);
}

// An unmap the device refuses on the unmapper's thread leaves the address lent and its
// page cached, and is tried again: EmptyCache, which waits for the thread, gets all.
TEST(CachingAllocatorTest, AnUnmapRefusedOffThreadIsTriedAgain) {
  SimBackend sim;
  FaultInjectingBackend faults(sim, /*seed=*/1, {});
  auto alloc = MakeCachingAllocator(
      faults, {.background_unmap = true, .new_page_headroom = 0, .max_new_page_headroom = 0});
  faults.set_rates({.unmap = 1.0});
  std::vector<DevicePtr> live;
  GrowPastScatteredIdlePages(*alloc, &live);
  EXPECT_TRUE(testing::Eventually([&] { return faults.injected().unmap >= 3; }));
  EXPECT_EQ(sim.counters().unmaps, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, 11 * kPage);  // 3 pages at two addresses
  faults.set_rates({});
  for (DevicePtr p : live) alloc->Free(p);
  alloc->EmptyCache();
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
}

// A child forked after the unmapper's thread started has no copy of that thread: there
// its unmaps run on the allocating thread, and nothing waits for the thread forever.
TEST(CachingAllocatorTest, AForkedChildUnmapsWithoutTheParentsThread) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(
      sim, {.background_unmap = true, .new_page_headroom = 0, .max_new_page_headroom = 0});
  std::vector<DevicePtr> live;
  GrowPastScatteredIdlePages(*alloc, &live);  // starts the thread
  ASSERT_TRUE(testing::Eventually([&] { return sim.counters().unmaps == 3; }));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a child that hangs fails the test instead of stalling it
    std::vector<DevicePtr> more;
    GrowPastScatteredIdlePages(*alloc, &more);  // lends again: unmapped inline
    for (DevicePtr p : live) alloc->Free(p);
    for (DevicePtr p : more) alloc->Free(p);
    alloc->EmptyCache();
    const bool empty = sim.counters().mapped_bytes == 0 && sim.counters().physical_bytes == 0;
    _exit(empty ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (DevicePtr p : live) alloc->Free(p);
}

// Pages idle in another stream's blocks may still be used by that stream's queued work:
// they are lent too, and the growing stream waits on the device for an event recorded
// after that work. The host waits for nothing.
TEST(CachingAllocatorTest, StitchingFromAnotherStreamMakesItWait) {
  SimBackend sim({.capacity = 4 * kPage});
  auto alloc = MakeCachingAllocator(sim, {.borrow = false});
  DevicePtr a = *alloc->Allocate(4 * kPage, kS2);
  alloc->Free(a);
  DevicePtr b = *alloc->Allocate(2 * kPage, kS2);  // what is left of S2's range: 2 pages
  ASSERT_TRUE(alloc->Allocate(2 * kPage, kS1).ok());
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_EQ(sim.counters().stream_waits, 1u);
  EXPECT_EQ(alloc->stats().cross_stream_lends, 1u);
  EXPECT_EQ(sim.counters().unmaps, 0u);  // lent: unmapped at a later slow path
  EXPECT_EQ(sim.counters().mapped_bytes, 6 * kPage);
  alloc->Free(b);
}

// Eight one-page blocks on S2, every other one freed (work queued on S2 may still use
// them), then four pages on S1 past the budget for new pages: S2's idle pages are lent to
// S1, whose stream waits for S2's event; their old addresses are unmapped once S2 ran.
TEST(CachingAllocatorTest, LendsAnotherStreamsPagesUntilThatStreamRan) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  testing::CheckedBackend checked(sim);
  EventHandle before = 0;
  checked.on_unmap = [&](DevicePtr, std::size_t) { EXPECT_TRUE(sim.EventCompleted(before)); };
  auto alloc = MakeCachingAllocator(checked, {.new_page_headroom = 0, .max_new_page_headroom = 0});
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*alloc->Allocate(kPage, kS2));
  std::vector<SimBackend::Piece> freed;
  for (int i = 0; i < 8; i += 2) {
    for (const SimBackend::Piece& p : sim.Backing(blocks[i], kPage)) freed.push_back(p);
    alloc->Free(blocks[i]);
  }
  before = sim.RecordEvent(kS2);  // stands for the work that used the freed blocks
  auto big = alloc->Allocate(4 * kPage, kS1);
  ASSERT_TRUE(big.ok()) << big.status();
  for (const SimBackend::Piece& p : sim.Backing(*big, 4 * kPage)) {
    EXPECT_TRUE(std::any_of(freed.begin(), freed.end(), [&](const SimBackend::Piece& f) {
      return f.handle == p.handle;
    })) << "not one of S2's idle pages";
  }
  EXPECT_EQ(sim.counters().physical_bytes, 8 * kPage);
  EXPECT_EQ(sim.counters().mapped_bytes, 12 * kPage);  // 4 pages at two addresses
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  EXPECT_GE(sim.counters().stream_waits, 1u);
  EXPECT_EQ(alloc->stats().cross_stream_lends, 1u);
  EXPECT_EQ(alloc->stats().stitch_count, 1u);
  ASSERT_TRUE(alloc->Allocate(64 * kMiB, kS1).ok());  // a slow path: S2 has not run
  EXPECT_EQ(sim.counters().unmaps, 0u);
  sim.CompleteStream(kS2);
  ASSERT_TRUE(alloc->Allocate(64 * kMiB, kS1).ok());  // the next slow path retires them
  EXPECT_EQ(sim.counters().unmaps, 4u);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  checked.on_unmap = nullptr;  // the allocator's teardown unmaps the rest
  sim.ReleaseEvent(before);
}

// A stitch that lends S1's idle pages makes S1 wait for the borrowers' work on those
// pages alone: a fence over memory the stitch does not touch stays up, to be waited for
// when that memory is used again (FSDP2's compute stream would otherwise wait for
// all-gathers it does not need yet).
TEST(CachingAllocatorTest, AStitchWaitsOnlyForTheFencesOverThePagesItLends) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  auto alloc = MakeCachingAllocator(sim, {.new_page_headroom = 0, .max_new_page_headroom = 0});
  std::vector<DevicePtr> s1;
  for (int i = 0; i < 3; ++i) s1.push_back(*alloc->Allocate(4 * kPage, kS1));
  for (DevicePtr p : s1) alloc->Free(p);
  std::vector<DevicePtr> s2;  // S2 borrows all three and frees them: three fences
  for (int i = 0; i < 3; ++i) s2.push_back(*alloc->Allocate(4 * kPage, kS2));
  for (DevicePtr p : s2) alloc->Free(p);
  ASSERT_EQ(alloc->stats().cross_stream_borrows, 3u);
  const std::uint64_t waits = sim.counters().stream_waits;
  const DevicePtr big = *alloc->Allocate(6 * kPage, kS1);  // one block grown by another's pages
  EXPECT_EQ(alloc->stats().stitch_count, 1u);
  EXPECT_EQ(sim.counters().synchronizes, 0u);
  // The fence over the block that grew and the one over the pages lent; not the third.
  EXPECT_EQ(sim.counters().stream_waits, waits + 2);
  const DevicePtr third = *alloc->Allocate(4 * kPage, kS1);
  EXPECT_TRUE(third + 4 * kPage <= big || big + 6 * kPage <= third);
  EXPECT_EQ(sim.counters().stream_waits, waits + 3);  // its fence, now
}

// A stream wait the device refuses: the growth waits for the device instead.
TEST(CachingAllocatorTest, AFailedStreamWaitWaitsForTheDevice) {
  SimBackend sim({.capacity = 4 * kPage});
  FaultInjectingBackend faults(sim, /*seed=*/1, {.stream_wait = 1});
  auto alloc = MakeCachingAllocator(faults);
  DevicePtr a = *alloc->Allocate(4 * kPage, kS2);
  alloc->Free(a);
  DevicePtr b = *alloc->Allocate(2 * kPage, kS2);
  ASSERT_TRUE(alloc->Allocate(2 * kPage, kS1).ok());
  EXPECT_EQ(faults.injected().stream_wait, 1u);
  EXPECT_EQ(sim.counters().stream_waits, 0u);
  EXPECT_EQ(sim.counters().synchronizes, 1u);
  alloc->Free(b);
}

// Within the budget but refused by the device (memory other processes took): the retry
// stitches idle pages rather than trimming every cached byte.
TEST(CachingAllocatorTest, StitchesWhenTheDeviceRefusesPagesWithinTheBudget) {
  SimBackend sim({.capacity = 8 * kPage});
  testing::CheckedBackend checked(sim);
  checked.claimed_capacity = 64 * kPage;
  auto alloc =
      MakeCachingAllocator(checked, {.new_page_headroom = 0.5, .max_new_page_headroom = 0.5});
  std::vector<DevicePtr> live;
  GrowPastScatteredIdlePages(*alloc, &live);
  EXPECT_EQ(sim.counters().mapped_bytes, 11 * kPage);  // three pages lent, not yet unmapped
  EXPECT_EQ(alloc->stats().stitch_count, 1u);
  EXPECT_EQ(alloc->stats().trim_count, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 8 * kPage);
}

// A shortage that needed stitching once raises the budget for new pages, so the same
// shortage later (the next training step) does not unmap again, up to the maximum
// (here without its floor of pages).
TEST(CachingAllocatorTest, StitchingRaisesTheBudgetForNewPages) {
  for (double max_headroom : {0.0, 1.0}) {
    SimBackend sim;
    auto alloc = MakeCachingAllocator(sim, {.new_page_headroom = 0,
                                            .max_new_page_headroom = max_headroom,
                                            .min_budget_pages = 0});
    std::vector<DevicePtr> live;
    GrowPastScatteredIdlePages(*alloc, &live);
    ASSERT_EQ(alloc->stats().stitch_count, 1u);
    for (DevicePtr p : live) alloc->Free(p);
    // 10 MiB: the freed 8 MiB block grows by a page, 2 MiB past the peak allocated.
    ASSERT_TRUE(alloc->Allocate(5 * kPage, kS1).ok());
    EXPECT_EQ(sim.counters().synchronizes, 0u);
    if (max_headroom > 0) {
      EXPECT_EQ(alloc->stats().stitch_count, 1u);
      EXPECT_EQ(sim.counters().physical_bytes, 9 * kPage);
    } else {
      EXPECT_EQ(alloc->stats().stitch_count, 2u);
      EXPECT_EQ(sim.counters().physical_bytes, 8 * kPage);
    }
  }
}

// A working set so small that its share of the peak is under a page: the budget's floor
// of pages lets the same shortage grow instead of stitching again each step.
TEST(CachingAllocatorTest, TheBudgetsFloorOfPagesServesSmallWorkingSets) {
  for (std::size_t floor : {std::size_t{0}, std::size_t{16}}) {
    SimBackend sim;
    auto alloc = MakeCachingAllocator(
        sim, {.new_page_headroom = 0, .max_new_page_headroom = 0, .min_budget_pages = floor});
    std::vector<DevicePtr> live;
    GrowPastScatteredIdlePages(*alloc, &live);
    for (DevicePtr p : live) alloc->Free(p);
    ASSERT_TRUE(alloc->Allocate(5 * kPage, kS1).ok());
    EXPECT_EQ(alloc->stats().stitch_count, floor == 0 ? 2u : 1u) << floor;
  }
}

// Two 6 MiB blocks in two 8 MiB ranges on a 16 MiB device: 4 MiB are free, 2 MiB at the
// end of each range. Without VMM that is an OOM; with it, the pages are stitched.
std::size_t ServeAfterSplits(Backend& backend, DeviceAllocator& alloc) {
  DevicePtr x = *alloc.Allocate(8 * kMiB, kS1);
  DevicePtr y = *alloc.Allocate(8 * kMiB, kS1);
  alloc.Free(x);
  alloc.Free(y);
  EXPECT_TRUE(alloc.Allocate(6 * kMiB, kS1).ok());
  EXPECT_TRUE(alloc.Allocate(6 * kMiB, kS1).ok());
  EXPECT_EQ(backend.counters().physical_bytes, 16 * kMiB);
  auto z = alloc.Allocate(4 * kMiB, kS1);
  return z.ok() ? 1 : 0;
}

TEST(CachingAllocatorTest, DefragmentsWhereSegmentsCannot) {
  SimBackend sim({.capacity = 16 * kMiB});
  auto alloc = MakeCachingAllocator(sim);
  EXPECT_EQ(ServeAfterSplits(sim, *alloc), 1u);
  EXPECT_EQ(sim.counters().peak_physical_bytes, 16 * kMiB);
  EXPECT_GE(alloc->stats().stitch_count, 1u);

  SimBackend plain({.capacity = 16 * kMiB, .vmm = false});
  auto naive = MakeCachingAllocator(plain);
  EXPECT_EQ(ServeAfterSplits(plain, *naive), 0u);
  OomReport r = naive->last_oom();
  EXPECT_EQ(r.requested_bytes, 4 * kMiB);
  EXPECT_EQ(r.allocated_bytes, 12 * kMiB);
  EXPECT_EQ(r.largest_free_bytes, 2 * kMiB);
}

TEST(CachingAllocatorTest, SegmentsWithoutVmmAreTrimmedUnderPressure) {
  SimBackend sim({.capacity = 16 * kMiB, .vmm = false});
  auto alloc = MakeCachingAllocator(sim);
  DevicePtr a = *alloc->Allocate(6 * kMiB, kS1);
  DevicePtr b = *alloc->Allocate(6 * kMiB, kS1);
  EXPECT_EQ(sim.counters().segment_allocs, 2u);
  alloc->Free(a);
  alloc->Free(b);
  // 16 MiB fits only after both cached segments are returned.
  auto c = alloc->Allocate(16 * kMiB, kS1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(sim.IsAccessible(*c, 16 * kMiB));
  EXPECT_GE(alloc->stats().trim_count, 1u);
  alloc->Free(*c);
  alloc->EmptyCache();
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
}

TEST(CachingAllocatorTest, TellsTheObserverAboutEveryBlockAndPage) {
  SimBackend sim;
  Recorder recorder;
  auto alloc = MakeCachingAllocator(sim, {.device = 1, .observer = &recorder});
  DevicePtr a = *alloc->Allocate(5 * kMiB, kS2);
  alloc->Free(a);
  alloc->EmptyCache();
  ASSERT_GE(recorder.events.size(), 4u);
  EXPECT_EQ(recorder.Count(AllocatorEventKind::kAlloc), 1);
  EXPECT_EQ(recorder.Count(AllocatorEventKind::kFree), 1);
  EXPECT_EQ(recorder.Count(AllocatorEventKind::kMap), 3);  // 5 MiB: three 2 MiB pages
  EXPECT_EQ(recorder.Count(AllocatorEventKind::kUnmap), 3);
  for (const AllocatorEvent& e : recorder.events) {
    EXPECT_EQ(e.device, 1);
    if (e.kind == AllocatorEventKind::kAlloc) {
      EXPECT_EQ(e.ptr, a);
      EXPECT_EQ(e.bytes, 5 * kMiB);
      EXPECT_EQ(e.stream, kS2);
    }
  }
}

TEST(CachingAllocatorTest, UnmapsOnlyAfterQueuedWorkCompleted) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  testing::CheckedBackend checked(sim);
  EventHandle before = 0;
  checked.on_unmap = [&](DevicePtr, std::size_t) {
    // Work queued on the stream before the free must be done when pages go.
    EXPECT_TRUE(sim.EventCompleted(before));
  };
  auto alloc = MakeCachingAllocator(checked);
  DevicePtr a = *alloc->Allocate(8 * kMiB, kS1);
  before = sim.RecordEvent(kS1);
  alloc->Free(a);
  alloc->EmptyCache();
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_GE(checked.synchronizations.load(), 1);
  sim.ReleaseEvent(before);
}

TEST(CachingAllocatorTest, ResetPeaks) {
  SimBackend sim;
  auto alloc = MakeCachingAllocator(sim);
  DevicePtr a = *alloc->Allocate(10 * kMiB, kS1);
  alloc->Free(a);
  alloc->EmptyCache();
  EXPECT_EQ(alloc->stats().peak_allocated_bytes, 10 * kMiB);
  alloc->ResetPeaks();
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.peak_allocated_bytes, 0u);
  EXPECT_EQ(s.peak_reserved_bytes, 0u);
}

}  // namespace
}  // namespace gpumem
