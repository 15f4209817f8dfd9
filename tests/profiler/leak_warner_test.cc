// The early warning's judgement of a leak that keeps something once an epoch, over runs
// where the site appears at any step: warned of in steps (its coarse series), and never
// withdrawn while it keeps growing, also at the step ends where the coarse series halves.
// And of a leak of one scalar a step, counted as the blocks it takes.
#include "profiler/leak_warning.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "profiler/live_blocks.h"
#include "profiler/site_history.h"

namespace gpumem {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kSite = (std::uint64_t{3} << 32) | 5;  // device 3, site 5

struct Said {
  int warnings = 0;
  int withdrawals = 0;
  std::uint64_t first_withdrawn = 0;
};

// A site that appears at step `start` and keeps 16 MiB every 50 steps, to step `end`.
Said RunFrom(std::uint64_t start, std::uint64_t end) {
  SiteHistory history;
  LeakWarner warner(5);
  const absl::flat_hash_map<std::int32_t, LeakWarner::DeviceFigures> devices = {
      {3, {64ull << 30, 1ull << 30}}};
  Said said;
  std::uint64_t live = 0;
  for (std::uint64_t step = 1; step <= end; ++step) {
    if (step >= start && (step - start) % 50 == 0) live += 16 * kMiB;
    absl::flat_hash_map<std::uint64_t, std::uint64_t> now;
    if (live > 0) now[kSite] = live;
    history.Add(step, now, {});
    for (const LeakWarning& w : warner.Check(step, history, devices)) {
      if (w.withdrawn) {
        if (said.withdrawals++ == 0) said.first_withdrawn = step;
      } else {
        ++said.warnings;
      }
    }
  }
  return said;
}

TEST(LeakWarner, LeakOnceAnEpochIsNeverWithdrawnWhereverItBegins) {
  for (std::uint64_t start = 1; start <= 2100; start += 7) {
    const Said said = RunFrom(start, start + 1500);
    EXPECT_GT(said.warnings, 0) << "start " << start;
    EXPECT_EQ(said.withdrawals, 0) << "start " << start << ", first withdrawn at step "
                                   << said.first_withdrawn;
  }
}

// Each step keeps its 4-byte loss: a 512-byte block on the device. Warned of once the site
// has kept the 1 MiB a leak must have grown by (2,048 steps), not before; counting the
// bytes asked for, it would take 262,144 steps.
TEST(LeakWarner, ScalarKeptEachStepIsWarnedOfByTheBlocksItTakes) {
  LiveBlocks blocks;
  SiteHistory history;
  LeakWarner warner(5);
  const absl::flat_hash_map<std::int32_t, LeakWarner::DeviceFigures> devices = {
      {3, {64ull << 30, 100 * kMiB}}};
  std::uint64_t first_warned = 0;
  for (std::uint64_t step = 1; step <= 3000 && first_warned == 0; ++step) {
    blocks.OnAlloc(3, 1 << 30, 64 * kMiB, 9);  // the batch, freed within the step
    blocks.OnAlloc(3, (2ull << 30) + step * 512, 4, 5);
    blocks.OnFree(1 << 30);
    history.Add(step, blocks.StepLowsByKeyAndStartStep(), {});
    for (const LeakWarning& w : warner.Check(step, history, devices)) {
      if (!w.withdrawn && first_warned == 0) first_warned = step;
    }
  }
  EXPECT_GE(first_warned, 2048u);
  EXPECT_LE(first_warned, 3000u);
}

}  // namespace
}  // namespace gpumem
