#include "allocator/sim_backend.h"

#include <gtest/gtest.h>

namespace gpumem {
namespace {

constexpr std::size_t kMiB = 1 << 20;

TEST(SimBackendTest, CountsPhysicalBytesAndEnforcesCapacity) {
  SimBackend sim({.capacity = 6 * kMiB});
  auto a = sim.CreatePhysical(2 * kMiB);
  auto b = sim.AllocateSegment(3 * kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(sim.counters().physical_bytes, 5 * kMiB);
  auto c = sim.CreatePhysical(2 * kMiB);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  sim.ReleasePhysical(*a);
  sim.FreeSegment(*b, 3 * kMiB);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().peak_physical_bytes, 5 * kMiB);
}

TEST(SimBackendTest, MappingMakesBytesAccessible) {
  SimBackend sim;
  DevicePtr va = *sim.ReserveAddressRange(8 * kMiB);
  PhysicalHandle p = *sim.CreatePhysical(4 * kMiB);
  EXPECT_FALSE(sim.IsAccessible(va, 1));
  ASSERT_TRUE(sim.Map(va + 2 * kMiB, 2 * kMiB, p, 0).ok());
  ASSERT_TRUE(sim.Map(va + 4 * kMiB, 2 * kMiB, p, 2 * kMiB).ok());
  EXPECT_TRUE(sim.IsAccessible(va + 2 * kMiB, 4 * kMiB));
  EXPECT_FALSE(sim.IsAccessible(va + 2 * kMiB, 4 * kMiB + 1));
  EXPECT_FALSE(sim.IsAccessible(va + kMiB, 2 * kMiB));
  ASSERT_TRUE(sim.Unmap(va + 2 * kMiB, 4 * kMiB).ok());
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  sim.ReleasePhysical(p);
  sim.ReleaseAddressRange(va, 8 * kMiB);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
}

TEST(SimBackendDeathTest, CatchesPolicyBugs) {
  SimBackend sim;
  DevicePtr va = *sim.ReserveAddressRange(4 * kMiB);
  PhysicalHandle p = *sim.CreatePhysical(2 * kMiB);
  ASSERT_TRUE(sim.Map(va, 2 * kMiB, p, 0).ok());
  EXPECT_DEATH(sim.Map(va, 2 * kMiB, p, 0).IgnoreError(), "overlaps a mapping");
  EXPECT_DEATH(sim.ReleasePhysical(p), "still mapped");
  EXPECT_DEATH(sim.Unmap(va + 2 * kMiB, 2 * kMiB).IgnoreError(), "no mapping starts there");
  EXPECT_DEATH(sim.FreeSegment(12345, 512), "no such segment");
}

TEST(SimBackendTest, ManualEventsCompleteWhenTheirStreamRuns) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  EventHandle e1 = sim.RecordEvent(1);
  EventHandle e2 = sim.RecordEvent(2);
  EXPECT_FALSE(sim.EventCompleted(e1));
  sim.CompleteStream(1);
  EXPECT_TRUE(sim.EventCompleted(e1));
  EXPECT_FALSE(sim.EventCompleted(e2));
  EventHandle e3 = sim.RecordEvent(1);
  EXPECT_FALSE(sim.EventCompleted(e3));
  sim.Synchronize();
  EXPECT_TRUE(sim.EventCompleted(e2));
  EXPECT_TRUE(sim.EventCompleted(e3));
  for (EventHandle e : {e1, e2, e3}) sim.ReleaseEvent(e);
  EXPECT_EQ(sim.live_events(), 0u);
}

}  // namespace
}  // namespace gpumem
