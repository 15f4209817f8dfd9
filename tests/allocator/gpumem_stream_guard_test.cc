#include "allocator/stream_guard.h"

#include <vector>

#include <gtest/gtest.h>

#include "allocator/sim_backend.h"

namespace gpumem {
namespace {

TEST(StreamGuardTest, ReleasesABlockOnlyWhenEveryStreamRan) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  StreamGuard guard(sim);
  guard.Defer(100, {1, 2});
  guard.Defer(200, {2});
  std::vector<DevicePtr> released;
  auto collect = [&] { guard.Collect([&](DevicePtr p) { released.push_back(p); }); };
  collect();
  EXPECT_TRUE(released.empty());
  sim.CompleteStream(1);
  collect();
  EXPECT_TRUE(released.empty());  // 100 still waits for stream 2
  EXPECT_EQ(guard.size(), 2u);
  sim.CompleteStream(2);
  collect();
  EXPECT_EQ(released, (std::vector<DevicePtr>{100, 200}));
  EXPECT_TRUE(guard.empty());
  EXPECT_EQ(sim.live_events(), 0u);
}

TEST(StreamGuardTest, KeepsPendingBlocksIntactWhileOthersComplete) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  StreamGuard guard(sim);
  guard.Defer(1, {5});
  guard.Defer(2, {6});
  guard.Defer(3, {5});
  sim.CompleteStream(6);
  std::vector<DevicePtr> released;
  guard.Collect([&](DevicePtr p) { released.push_back(p); });
  EXPECT_EQ(released, (std::vector<DevicePtr>{2}));
  released.clear();
  // The blocks kept back must still wait for stream 5, with their events.
  guard.Collect([&](DevicePtr p) { released.push_back(p); });
  EXPECT_TRUE(released.empty());
  sim.CompleteStream(5);
  guard.Collect([&](DevicePtr p) { released.push_back(p); });
  EXPECT_EQ(released, (std::vector<DevicePtr>{1, 3}));
  EXPECT_EQ(sim.live_events(), 0u);
}

TEST(StreamGuardTest, ReleasesEventsOfBlocksStillHeldAtDestruction) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  {
    StreamGuard guard(sim);
    guard.Defer(1, {1, 2, 3});
  }
  EXPECT_EQ(sim.live_events(), 0u);
}

}  // namespace
}  // namespace gpumem
