#include "allocator/background_unmapper.h"

#include <chrono>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "allocator/fault_injecting_backend.h"
#include "allocator/sim_backend.h"
#include "tests/allocator/eventually.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

using testing::Eventually;

constexpr StreamId kStream = 1;

// A run of `pages` pages at the start of a fresh range, mapped from page `first` on, and
// a job to unmap them once the work queued on kStream so far has run.
std::shared_ptr<UnmapJob> MappedRun(SimBackend& sim, std::size_t pages, std::size_t first = 0) {
  const DevicePtr base = *sim.ReserveAddressRange(64 * kPage);
  for (std::size_t i = first; i < pages; ++i) {
    EXPECT_TRUE(sim.Map(base + i * kPage, kPage, *sim.CreatePhysical(kPage), 0).ok());
  }
  auto job = std::make_shared<UnmapJob>();
  job->done = sim.RecordEvent(kStream);
  job->page_bytes = kPage;
  job->runs.push_back({base, pages, 0});
  return job;
}

TEST(BackgroundUnmapperTest, UnmapsOnceTheWorkRanTopDown) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  BackgroundUnmapper unmapper(sim, nullptr);
  std::shared_ptr<UnmapJob> job = MappedRun(sim, 4);
  unmapper.Submit(job);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(job->finished.load());
  EXPECT_EQ(sim.counters().unmaps, 0u);
  sim.CompleteStream(kStream);
  EXPECT_TRUE(Eventually([&] { return job->finished.load(); }));
  EXPECT_EQ(job->runs[0].unmapped, 4u);
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  sim.ReleaseEvent(job->done);
}

// A drain's caller waited for the device: the thread unmaps without asking the event
// (whose query may have failed), even while paused.
TEST(BackgroundUnmapperTest, ADrainUnmapsAtOnce) {
  SimBackend sim({.events = SimBackendOptions::Events::kManual});
  BackgroundUnmapper unmapper(sim, nullptr);
  std::shared_ptr<UnmapJob> job = MappedRun(sim, 3);
  BackgroundUnmapper::Pause pause(&unmapper);
  unmapper.Submit(job);
  unmapper.Drain();
  EXPECT_TRUE(job->finished.load());
  EXPECT_EQ(sim.counters().unmaps, 3u);
  sim.ReleaseEvent(job->done);
}

// While the allocating thread maps, the unmapper makes no driver call.
TEST(BackgroundUnmapperTest, APauseHoldsTheUnmapsBack) {
  SimBackend sim;  // events complete at once
  BackgroundUnmapper unmapper(sim, nullptr);
  std::shared_ptr<UnmapJob> job = MappedRun(sim, 2);
  {
    BackgroundUnmapper::Pause pause(&unmapper);
    unmapper.Submit(job);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(sim.counters().unmaps, 0u);
  }
  EXPECT_TRUE(Eventually([&] { return job->finished.load(); }));
  EXPECT_EQ(sim.counters().unmaps, 2u);
  sim.ReleaseEvent(job->done);
}

// What the device refuses stays mapped, and the run's count says how many went (from
// the top): the pool keeps the rest of its hole for a later try.
TEST(BackgroundUnmapperTest, StopsARunAtARefusedUnmap) {
  SimBackend sim;
  FaultInjectingBackend faults(sim, /*seed=*/1, {.unmap = 1.0});
  BackgroundUnmapper unmapper(faults, nullptr);
  std::shared_ptr<UnmapJob> job = MappedRun(sim, 3);
  unmapper.Submit(job);
  unmapper.Drain();
  EXPECT_TRUE(job->finished.load());
  EXPECT_EQ(job->runs[0].unmapped, 0u);
  EXPECT_EQ(faults.injected().unmap, 1u);  // the first refusal ends the run
  EXPECT_EQ(sim.counters().mapped_bytes, 3 * kPage);
  faults.set_rates({});
  job->finished = false;
  unmapper.Submit(job);
  unmapper.Drain();
  EXPECT_EQ(job->runs[0].unmapped, 3u);
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  sim.ReleaseEvent(job->done);
}

}  // namespace
}  // namespace gpumem
