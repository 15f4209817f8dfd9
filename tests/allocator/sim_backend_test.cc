#include "allocator/sim_backend.h"

#include <gtest/gtest.h>

#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

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

// The simulated address space is 48 TiB, and a long replay releases and reserves ranges
// by the thousand: once the fresh area is used up, released ranges' addresses are reused.
TEST(SimBackendTest, ReusesReleasedAddressRangesOnceTheFreshAreaIsUsedUp) {
  SimBackend sim;
  constexpr std::size_t kTiB = std::size_t{1} << 40;
  DevicePtr a = *sim.ReserveAddressRange(15 * kTiB);
  DevicePtr b = *sim.ReserveAddressRange(15 * kTiB);
  DevicePtr c = *sim.ReserveAddressRange(15 * kTiB);
  EXPECT_EQ(sim.ReserveAddressRange(15 * kTiB).status().code(),
            absl::StatusCode::kResourceExhausted);
  sim.ReleaseAddressRange(b, 15 * kTiB);
  absl::StatusOr<DevicePtr> again = sim.ReserveAddressRange(8 * kTiB);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, b);
  DevicePtr rest = *sim.ReserveAddressRange(6 * kTiB);  // after `again`, before `c`
  EXPECT_GT(rest, *again);
  EXPECT_LT(rest + 6 * kTiB, c);
  EXPECT_FALSE(sim.ReserveAddressRange(4 * kTiB).ok());  // 3 TiB fresh, a 1 TiB gap
  for (auto [base, bytes] : {std::pair{a, 15 * kTiB}, {c, 15 * kTiB}, {*again, 8 * kTiB},
                             {rest, 6 * kTiB}}) {
    sim.ReleaseAddressRange(base, bytes);
  }
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

// A stream that waited for an event has run only once the work before that event has:
// completing it completes the awaited stream up to the event, and through that stream's
// own earlier waits, further.
TEST(SimBackendTest, CompletingAStreamCompletesWhatItWaitedFor) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  EventHandle on3 = sim.RecordEvent(3);
  ASSERT_TRUE(sim.StreamWaitEvent(2, on3).ok());
  EventHandle on2 = sim.RecordEvent(2);
  EventHandle later3 = sim.RecordEvent(3);  // after the awaited one: not waited for
  ASSERT_TRUE(sim.StreamWaitEvent(1, on2).ok());
  EventHandle after_wait = sim.RecordEvent(2);  // queued on 2 after the event 1 waits for
  EXPECT_EQ(sim.counters().stream_waits, 2u);
  sim.CompleteStream(1);
  EXPECT_TRUE(sim.EventCompleted(on2));
  EXPECT_TRUE(sim.EventCompleted(on3));
  EXPECT_FALSE(sim.EventCompleted(later3));
  EXPECT_FALSE(sim.EventCompleted(after_wait));
  // A wait queued after a stream's last event runs when all of that stream runs.
  ASSERT_TRUE(sim.StreamWaitEvent(1, later3).ok());
  EXPECT_FALSE(sim.EventCompleted(later3));
  sim.CompleteStream(1);
  EXPECT_TRUE(sim.EventCompleted(later3));
  EXPECT_FALSE(sim.EventCompleted(after_wait));
  for (EventHandle e : {on3, on2, later3, after_wait}) sim.ReleaseEvent(e);
  EXPECT_EQ(sim.live_events(), 0u);
}

}  // namespace
}  // namespace gpumem
