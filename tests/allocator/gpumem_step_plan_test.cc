#include "allocator/step_plan.h"

#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/sim_backend.h"

namespace gpumem {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kPage = 2 * kMiB;

PlannedBlock Lifetime(std::size_t bytes, std::uint64_t start, std::uint64_t end) {
  return {.bytes = bytes, .start = start, .end = end, .planned = true};
}

TEST(PackBlocksTest, BlocksApartInTimeShareBytes) {
  // A step of 10 positions: a and b never live together; c wraps into the next step,
  // where it meets a's next instance.
  std::vector<PlannedBlock> blocks = {Lifetime(4 * kMiB, 0, 4), Lifetime(4 * kMiB, 5, 9),
                                      Lifetime(2 * kMiB, 8, 12)};
  EXPECT_EQ(PackBlocks(blocks, 10), 6 * kMiB);
  EXPECT_EQ(blocks[0].offset, 0u);
  EXPECT_EQ(blocks[1].offset, 0u);
  EXPECT_EQ(blocks[2].offset, 4 * kMiB);
}

TEST(PackBlocksTest, LeavesUnplannedBlocksOut) {
  std::vector<PlannedBlock> blocks = {Lifetime(8 * kMiB, 0, 3), Lifetime(kMiB, 1, 2)};
  blocks[0].planned = false;
  EXPECT_EQ(PackBlocks(blocks, 4), kMiB);
  EXPECT_EQ(blocks[1].offset, 0u);
}

// Live blocks of a run, checked never to overlap.
class LiveSet {
 public:
  void Add(DevicePtr p, std::size_t bytes) {
    auto next = live_.lower_bound(p);
    if (next != live_.end()) {
      EXPECT_LE(p + bytes, next->first) << "overlaps a live block";
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      EXPECT_LE(prev->first + prev->second, p) << "overlaps a live block";
    }
    live_[p] = bytes;
  }
  void Remove(DevicePtr p) { live_.erase(p); }

 private:
  std::map<DevicePtr, std::size_t> live_;
};

// One training step: activations freed in reverse, a gradient kept into the next step
// (freed at its start, as zero_grad does) and an odd-sized workspace between.
struct Step {
  std::vector<DevicePtr> Run(DeviceAllocator& a, LiveSet& live, DevicePtr* grad,
                             std::size_t extra = 0) {
    std::vector<DevicePtr> addrs;
    auto alloc = [&](std::size_t bytes) {
      absl::StatusOr<DevicePtr> p = a.Allocate(bytes, kDefaultStream);
      EXPECT_TRUE(p.ok()) << p.status();
      live.Add(*p, bytes);
      addrs.push_back(*p);
      return *p;
    };
    auto free = [&](DevicePtr p) {
      live.Remove(p);
      a.Free(p);
    };
    if (*grad != 0) free(*grad);
    const DevicePtr x = alloc(3 * kMiB + 512);
    const DevicePtr y = alloc(5 * kMiB);
    const DevicePtr w = alloc(7 * kMiB + extra);
    free(w);
    const DevicePtr z = alloc(6 * kMiB);
    free(z);
    free(y);
    *grad = alloc(3 * kMiB + 512);
    free(x);
    return addrs;
  }
};

TEST(StepPlannerTest, ServesRepeatingStepsFromOnePlannedLayout) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, {.plan_steps = true});
  LiveSet live;
  DevicePtr grad = 0;
  Step step;
  std::vector<std::vector<DevicePtr>> addrs;
  for (int s = 0; s < 6; ++s) {
    addrs.push_back(step.Run(*a, live, &grad));
    a->StepBoundary();
  }
  // Learned from steps 0 and 1, planned from step 2 on: the same addresses every step.
  EXPECT_EQ(addrs[3], addrs[2]);
  EXPECT_EQ(addrs[5], addrs[2]);
  EXPECT_NE(addrs[2], addrs[1]);
  live.Remove(grad);
  a->Free(grad);
  EXPECT_EQ(a->stats().allocated_bytes, 0u);
  a->EmptyCache();
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
}

TEST(StepPlannerTest, PlanningDoesNotRaiseReserved) {
  auto peak = [](bool plan) {
    SimBackend sim;
    auto a = MakeCachingAllocator(sim, {.plan_steps = plan});
    LiveSet live;
    DevicePtr grad = 0;
    Step step;
    for (int s = 0; s < 8; ++s) {
      step.Run(*a, live, &grad);
      a->StepBoundary();
    }
    return a->stats().peak_reserved_bytes;
  };
  EXPECT_LE(peak(true), peak(false));
}

TEST(StepPlannerTest, AStepThatLeavesThePlanFallsBackAndIsLearnedAgain) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, {.plan_steps = true});
  LiveSet live;
  DevicePtr grad = 0;
  Step step;
  for (int s = 0; s < 3; ++s) {
    step.Run(*a, live, &grad);
    a->StepBoundary();
  }
  const std::vector<DevicePtr> planned = step.Run(*a, live, &grad);
  a->StepBoundary();
  // A new shape from here on (the workspace grows): served by the general pools, then
  // dropped after two missed steps, learned from two of the new steps and planned again.
  std::vector<std::vector<DevicePtr>> after;
  for (int s = 0; s < 7; ++s) {
    after.push_back(step.Run(*a, live, &grad, 4 * kMiB));
    a->StepBoundary();
  }
  EXPECT_NE(after[0], planned);
  EXPECT_EQ(after[6], after[5]);
  EXPECT_NE(after[5], after[1]);
  live.Remove(grad);
  a->Free(grad);
  a->EmptyCache();
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
}

TEST(StepPlannerTest, WithoutStepsNothingIsPlanned) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, {.plan_steps = true});
  auto b = MakeCachingAllocator(sim, {.plan_steps = false});
  LiveSet live_a, live_b;
  DevicePtr grad_a = 0, grad_b = 0;
  Step step;
  for (int s = 0; s < 4; ++s) {
    // Different allocators, one device: compare what each reserves, not addresses.
    step.Run(*a, live_a, &grad_a);
    step.Run(*b, live_b, &grad_b);
  }
  EXPECT_EQ(a->stats().peak_reserved_bytes, b->stats().peak_reserved_bytes);
}

}  // namespace
}  // namespace gpumem
