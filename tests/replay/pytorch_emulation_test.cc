// The PyTorch emulations' rules one at a time, each against what
// c10/cuda/CUDACachingAllocator.cpp does (the real traces check them all together in
// fidelity_test.cc).
#include <memory>
#include <thread>
#include <vector>

#include "allocator/emulation/pytorch_allocator.h"
#include "allocator/sim_backend.h"
#include "gtest/gtest.h"

namespace gpumem::emulation {
namespace {

constexpr std::size_t kMiB = 1 << 20;

struct Fixture {
  explicit Fixture(bool expandable, std::uint64_t capacity = std::uint64_t{1} << 40,
                   SimBackendOptions::Events events = SimBackendOptions::Events::kImmediate)
      : sim([&] {
          SimBackendOptions o;
          o.capacity = capacity;
          o.events = events;
          return o;
        }()) {
    PytorchOptions options;
    options.expandable_segments = expandable;
    allocator = std::make_unique<PytorchCachingAllocator>(sim, options);
  }
  DevicePtr Alloc(std::size_t bytes, StreamId stream = 0) {
    absl::StatusOr<DevicePtr> p = allocator->Allocate(bytes, stream);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.value_or(0);
  }
  std::uint64_t reserved() const { return sim.counters().physical_bytes; }

  SimBackend sim;
  std::unique_ptr<PytorchCachingAllocator> allocator;
};

TEST(PytorchEmulationTest, SmallRequestsRoundTo512AndShareA2MiBSegment) {
  Fixture f(false);
  const DevicePtr a = f.Alloc(1);
  const DevicePtr b = f.Alloc(513);
  const DevicePtr c = f.Alloc(0);
  EXPECT_EQ(b, a + 512);
  EXPECT_EQ(c, b + 1024);
  EXPECT_EQ(f.reserved(), 2 * kMiB);
  EXPECT_EQ(f.allocator->stats().allocated_bytes, 514u);  // as requested
}

TEST(PytorchEmulationTest, MidSizeRequestsAreCarvedFrom20MiBSegments) {
  Fixture f(false);
  const DevicePtr a = f.Alloc(5 * kMiB);
  const DevicePtr b = f.Alloc(5 * kMiB);
  EXPECT_EQ(b, a + 5 * kMiB);
  EXPECT_EQ(f.reserved(), 20 * kMiB);
}

TEST(PytorchEmulationTest, LargeRequestsGetTheirOwnSegmentRoundedTo2MiB) {
  Fixture f(false);
  f.Alloc(11 * kMiB + 1);
  EXPECT_EQ(f.reserved(), 12 * kMiB);
}

TEST(PytorchEmulationTest, LargeBlocksSplitWhenMoreThan1MiBRemains) {
  Fixture f(false);
  const DevicePtr a = f.Alloc(9 * kMiB);
  f.allocator->Free(a);
  // 18.5 MiB from the cached 20 MiB segment leaves 1.5 MiB, split off and free: the next
  // 1.5 MiB request fits there.
  EXPECT_EQ(f.Alloc(18 * kMiB + kMiB / 2), a);
  EXPECT_EQ(f.Alloc(kMiB + kMiB / 2), a + 18 * kMiB + kMiB / 2);
  EXPECT_EQ(f.reserved(), 20 * kMiB);
}

TEST(PytorchEmulationTest, FreedNeighboursMergeAndBestFitReusesThem) {
  Fixture f(false);
  const DevicePtr a = f.Alloc(4 * kMiB);
  const DevicePtr b = f.Alloc(4 * kMiB);
  f.Alloc(4 * kMiB);  // keeps the rest of the segment apart
  f.allocator->Free(b);
  f.allocator->Free(a);
  EXPECT_EQ(f.Alloc(8 * kMiB), a);
  EXPECT_EQ(f.reserved(), 20 * kMiB);
}

TEST(PytorchEmulationTest, OnFailureReleasesCachedSegmentsAndRetries) {
  Fixture f(false, 40 * kMiB);
  f.allocator->Free(f.Alloc(30 * kMiB));
  f.Alloc(32 * kMiB);  // 30 cached + 32 new > 40: release the cache, then it fits
  EXPECT_EQ(f.reserved(), 32 * kMiB);
  EXPECT_EQ(f.allocator->stats().trim_count, 1u);
}

TEST(PytorchEmulationTest, OomReportsWhatWasHeld) {
  for (bool expandable : {false, true}) {
    Fixture f(expandable, 40 * kMiB);
    f.Alloc(30 * kMiB);
    absl::StatusOr<DevicePtr> p = f.allocator->Allocate(20 * kMiB, 0);
    ASSERT_FALSE(p.ok());
    EXPECT_TRUE(absl::IsResourceExhausted(p.status()));
    const OomReport r = f.allocator->last_oom();
    EXPECT_EQ(r.requested_bytes, 20 * kMiB);
    EXPECT_EQ(r.allocated_bytes, 30 * kMiB);
    // Expandable: two 20 MiB pages for the live block; plain: one 30 MiB segment.
    EXPECT_EQ(r.reserved_bytes, expandable ? 40 * kMiB : 30 * kMiB);
    EXPECT_EQ(r.capacity_bytes, 40 * kMiB);
    EXPECT_EQ(f.allocator->stats().oom_count, 1u);
  }
}

TEST(PytorchEmulationTest, AbsurdRequestsAreOomsNotCrashes) {
  for (bool expandable : {false, true}) {
    Fixture f(expandable);
    for (std::size_t bytes : {~std::size_t{0}, std::size_t{1} << 63, std::size_t{1} << 45}) {
      absl::StatusOr<DevicePtr> p = f.allocator->Allocate(bytes, 0);
      EXPECT_TRUE(absl::IsResourceExhausted(p.status())) << bytes;
    }
    EXPECT_EQ(f.reserved(), 0u);
  }
}

TEST(PytorchEmulationTest, FreeBlocksAreReusedOnlyByTheirOwnStream) {
  Fixture f(false);
  f.allocator->Free(f.Alloc(30 * kMiB, 1));
  f.Alloc(30 * kMiB, 2);
  EXPECT_EQ(f.reserved(), 60 * kMiB);
}

TEST(PytorchEmulationTest, RecordStreamDelaysReuseUntilTheOtherStreamRan) {
  Fixture f(false, std::uint64_t{1} << 40, SimBackendOptions::Events::kManual);
  const DevicePtr a = f.Alloc(30 * kMiB, 1);
  f.allocator->RecordStream(a, 2);
  f.allocator->Free(a);
  const DevicePtr b = f.Alloc(30 * kMiB, 1);  // stream 2 may still read a
  EXPECT_NE(b, a);
  f.allocator->Free(b);
  f.sim.CompleteStream(2);
  f.Alloc(30 * kMiB, 1);
  f.Alloc(30 * kMiB, 1);  // both cached blocks are free now: no new segment
  EXPECT_EQ(f.reserved(), 60 * kMiB);
  EXPECT_EQ(f.sim.live_events(), 0u);
}

TEST(PytorchEmulationTest, ExpandableSegmentsGrowContiguouslyInPages) {
  Fixture f(true);
  const DevicePtr a = f.Alloc(30 * kMiB);
  const DevicePtr b = f.Alloc(30 * kMiB);
  EXPECT_EQ(b, a + 30 * kMiB);
  EXPECT_EQ(f.reserved(), 60 * kMiB);  // three 20 MiB pages
  const DevicePtr s = f.Alloc(4096);
  EXPECT_EQ(f.reserved(), 62 * kMiB);  // a 2 MiB page in the small pool's own segment
  EXPECT_TRUE(f.sim.IsAccessible(a, 60 * kMiB));
  EXPECT_TRUE(f.sim.IsAccessible(s, 4096));
}

TEST(PytorchEmulationTest, ExpandableReleaseUnmapsOnlyWholeFreePages) {
  Fixture f(true);
  const DevicePtr a = f.Alloc(30 * kMiB);
  f.Alloc(30 * kMiB);
  f.allocator->Free(a);
  f.allocator->EmptyCache();
  // [0, 30) was free: page 0 (0-20 MiB) goes, page 1 (20-40) still holds the second block.
  EXPECT_EQ(f.reserved(), 40 * kMiB);
  EXPECT_FALSE(f.sim.IsAccessible(a, 1));
  // The unmapped hole is mapped again at the lowest address that fits.
  EXPECT_EQ(f.Alloc(20 * kMiB), a);
  EXPECT_EQ(f.reserved(), 60 * kMiB);
}

TEST(PytorchEmulationTest, EmptyCacheGivesBackEverythingFree) {
  for (bool expandable : {false, true}) {
    Fixture f(expandable);
    const DevicePtr a = f.Alloc(30 * kMiB);
    const DevicePtr b = f.Alloc(3 * kMiB);
    const DevicePtr c = f.Alloc(4096);
    for (DevicePtr p : {a, b, c}) f.allocator->Free(p);
    f.allocator->EmptyCache();
    EXPECT_EQ(f.reserved(), 0u) << expandable;
    EXPECT_EQ(f.allocator->stats().reserved_bytes, 0u);
    EXPECT_EQ(f.allocator->stats().allocated_bytes, 0u);
  }
}

TEST(PytorchEmulationTest, DestructionReturnsAllDeviceMemory) {
  for (bool expandable : {false, true}) {
    Fixture f(expandable);
    f.Alloc(30 * kMiB);
    f.Alloc(4096);
    f.allocator.reset();
    EXPECT_EQ(f.sim.counters().physical_bytes, 0u);
    EXPECT_EQ(f.sim.counters().reserved_va_bytes, 0u);
  }
}

TEST(PytorchEmulationTest, StatsFollowTheBackend) {
  Fixture f(false);
  const DevicePtr a = f.Alloc(30 * kMiB);
  f.Alloc(1000);
  f.allocator->Free(a);
  const AllocatorStats s = f.allocator->stats();
  EXPECT_EQ(s.allocated_bytes, 1000u);
  EXPECT_EQ(s.peak_allocated_bytes, 30 * kMiB + 1000);
  EXPECT_EQ(s.reserved_bytes, f.reserved());
  EXPECT_EQ(s.peak_reserved_bytes, f.sim.counters().peak_physical_bytes);
  EXPECT_EQ(s.largest_free_bytes, 30 * kMiB);
  EXPECT_EQ(s.active_blocks, 1u);
}

// PyTorch's allocator is shared by every thread of the process; so is the emulation.
TEST(PytorchEmulationTest, ManyThreadsAtOnce) {
  for (bool expandable : {false, true}) {
    Fixture f(expandable);
    std::vector<std::thread> threads;
    for (StreamId stream = 1; stream <= 4; ++stream) {
      threads.emplace_back([&f, stream] {
        std::vector<DevicePtr> live;
        for (int i = 0; i < 400; ++i) {
          absl::StatusOr<DevicePtr> p =
              f.allocator->Allocate((i % 7 + 1) * (i % 3 == 0 ? kMiB : 4096), stream);
          ASSERT_TRUE(p.ok());
          live.push_back(*p);
          if (i % 3 == 2) {
            f.allocator->Free(live.front());
            live.erase(live.begin());
          }
        }
        for (DevicePtr p : live) f.allocator->Free(p);
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(f.allocator->stats().allocated_bytes, 0u);
    f.allocator->EmptyCache();
    EXPECT_EQ(f.reserved(), 0u);
  }
}

}  // namespace
}  // namespace gpumem::emulation
