// The early warning's judgement of leaks that rise only now and then, and of a cache that
// fills: a leak kept once an epoch, over runs where the site appears at any step, or every
// 2 to 200 steps, or at random steps, is warned of in steps (its coarse series) and not
// withdrawn while it keeps growing, also where the coarse series halves; a cache that
// filled is withdrawn at its stop and not warned of again. And a leak of one scalar a
// step, counted as the blocks it takes.
#include "profiler/leak_warning.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>
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

// What the warner says of a site whose live bytes at each step are `live_at(step)`.
template <typename LiveAt>
Said WarnerSays(std::uint64_t end, LiveAt live_at) {
  SiteHistory history;
  LeakWarner warner(5);
  const absl::flat_hash_map<std::int32_t, LeakWarner::DeviceFigures> devices = {
      {3, {64ull << 30, 1ull << 30}}};
  Said said;
  for (std::uint64_t step = 1; step <= end; ++step) {
    absl::flat_hash_map<std::uint64_t, std::uint64_t> now;
    if (const std::uint64_t live = live_at(step); live > 0) now[kSite] = live;
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

// A site that appears at step `start` and keeps 16 MiB every 50 steps, to step `end`.
Said RunFrom(std::uint64_t start, std::uint64_t end) {
  return WarnerSays(end, [start](std::uint64_t step) {
    return step < start ? 0 : 16 * kMiB * ((step - start) / 50 + 1);
  });
}

TEST(LeakWarner, LeakOnceAnEpochIsNeverWithdrawnWhereverItBegins) {
  for (std::uint64_t start = 1; start <= 2100; start += 7) {
    const Said said = RunFrom(start, start + 1500);
    EXPECT_GT(said.warnings, 0) << "start " << start;
    EXPECT_EQ(said.withdrawals, 0) << "start " << start << ", first withdrawn at step "
                                   << said.first_withdrawn;
  }
}

// Leaks that keep something every `period` steps, of any period from every other step to
// every 200th: warned of, never withdrawn, whatever pause the coarse series is in.
TEST(LeakWarner, StaircaseLeaksOfAnyPeriodAreWarnedOfAndKept) {
  for (std::uint64_t period : {2, 3, 7, 10, 25, 50, 64, 100, 200}) {
    for (std::uint64_t start : {1, 37, 400}) {
      const std::uint64_t end = start + 40 * period + 600;
      const Said said = WarnerSays(end, [start, period](std::uint64_t step) {
        return step < start ? 0 : 16 * kMiB * ((step - start) / period + 1);
      });
      EXPECT_GT(said.warnings, 0) << "period " << period << ", start " << start;
      EXPECT_EQ(said.withdrawals, 0) << "period " << period << ", start " << start
                                     << ", first withdrawn at step " << said.first_withdrawn;
    }
  }
}

// Leaks that keep something at random steps (each step with chance 1/`mean_gap`, as a
// batch skipped when its loss goes up): the pauses between rises vary, and a long one is
// rarely reason to withdraw the warning. A pause past three times the longest seen still
// withdraws a few (4 of these 100); a fixed 4 coarse samples withdrew 25.
TEST(LeakWarner, LeaksAtRandomStepsAreRarelyWithdrawn) {
  int withdrawn_runs = 0, unwarned_runs = 0, runs = 0;
  for (std::uint64_t mean_gap : {5, 20, 50, 100}) {
    for (std::uint32_t seed = 1; seed <= 25; ++seed) {
      std::mt19937 random(seed);
      std::vector<std::uint64_t> live(1, 0);
      const std::uint64_t end = 60 * mean_gap + 600;
      for (std::uint64_t step = 1; step <= end; ++step) {
        live.push_back(live.back() + (random() % mean_gap == 0 ? 16 * kMiB : 0));
      }
      const Said said = WarnerSays(end, [&live](std::uint64_t step) { return live[step]; });
      ++runs;
      withdrawn_runs += said.withdrawals > 0;
      unwarned_runs += said.warnings == 0;
    }
  }
  EXPECT_LE(withdrawn_runs, 5) << "of " << runs;
  EXPECT_EQ(unwarned_runs, 0) << "of " << runs;
}

// A cache filled over 150 steps, 4 MiB each, then held (a teacher's outputs cached for
// the first epoch): warned of while it fills, withdrawn once it holds, and not said again
// when its coarse series, which lags, still shows the fill.
TEST(LeakWarner, CacheThatFilledIsNotWarnedOfAgainInSteps) {
  for (std::uint64_t start : {10, 51, 300, 1000}) {
    const Said said = WarnerSays(start + 1200, [start](std::uint64_t step) {
      return step < start ? 0 : 4 * kMiB * std::min<std::uint64_t>(step - start + 1, 150);
    });
    EXPECT_EQ(said.warnings, 1) << "start " << start;
    EXPECT_EQ(said.withdrawals, 1) << "start " << start;
    EXPECT_LE(said.first_withdrawn, start + 150 + 40) << "start " << start;
  }
}

// Generation without a KV cache: each request's passes keep a longer prefix (here 1 MiB
// more a pass, over 192 passes from 8 MiB), and the next request starts again from 8 MiB.
// Warned of in the first request, that warning is withdrawn where the memory falls back,
// and the later requests, refilling what was given back, are not warned of.
TEST(LeakWarner, GrowthGivenBackAtARequestsEndIsWithdrawnThere) {
  const Said said = WarnerSays(20 * 192, [](std::uint64_t step) {
    return 8 * kMiB + kMiB * ((step - 1) % 192);
  });
  EXPECT_EQ(said.warnings, 1);
  EXPECT_EQ(said.withdrawals, 1);
  EXPECT_EQ(said.first_withdrawn, 193u);
}

// A table cached for each sequence length seen (an unbounded lru_cache), a batch of one of
// 64 lengths a step: new lengths come ever more rarely, the cache filling ever more slowly
// towards 520 MiB. Once a warning of it was withdrawn, what it grew before does
// not warn again: a later warning in steps rests on growth since the withdrawal alone.
TEST(LeakWarner, ACacheThatFillsEverMoreSlowlyIsNotWarnedOfAgainForItsOldGrowth) {
  const absl::flat_hash_map<std::int32_t, LeakWarner::DeviceFigures> devices = {
      {3, {4ull << 30, 1ull << 30}}};
  int withdrawn_runs = 0;
  for (std::uint32_t seed = 1; seed <= 60; ++seed) {  // a fifth of them pause and go on
    SiteHistory history;
    LeakWarner warner(5);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::uint64_t> length(1, 64);
    std::vector<bool> seen(65, false);
    std::uint64_t live = 0, withdrawn_at = 0;
    for (std::uint64_t step = 1; step <= 1500; ++step) {
      const std::uint64_t n = length(rng);
      if (!seen[n]) live += n * 256 * 1024;  // 64 n rows of 1024 floats
      seen[n] = true;
      history.Add(step, {{kSite, live}}, {});
      for (const LeakWarning& w : warner.Check(step, history, devices)) {
        if (w.withdrawn) {
          withdrawn_at = step;
        } else if (withdrawn_at != 0 && w.in_steps_over > 0) {
          EXPECT_GE(step - w.in_steps_over, withdrawn_at) << "seed " << seed << ", step " << step;
        }
      }
    }
    withdrawn_runs += withdrawn_at != 0;
  }
  EXPECT_EQ(withdrawn_runs, 60);
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

// Two sites growing alike, as one kept object's two tensors do: the one holding more is
// named first, whichever key it has.
TEST(LeakWarner, OfSitesGrowingAlikeTheOneHoldingMoreComesFirst) {
  for (const std::uint64_t larger : {kSite, kSite + 1}) {
    const std::uint64_t smaller = larger == kSite ? kSite + 1 : kSite;
    SiteHistory history;
    LeakWarner warner(5);
    const absl::flat_hash_map<std::int32_t, LeakWarner::DeviceFigures> devices = {
        {3, {64ull << 30, 1ull << 30}}};
    std::vector<std::uint64_t> order;
    for (std::uint64_t step = 1; step <= 10 && order.empty(); ++step) {
      history.Add(step, {{larger, (64 + 8 * step) * kMiB}, {smaller, 8 * step * kMiB}}, {});
      for (const LeakWarning& w : warner.Check(step, history, devices)) order.push_back(w.key);
    }
    EXPECT_EQ(order, (std::vector<std::uint64_t>{larger, smaller}));
  }
}

}  // namespace
}  // namespace gpumem
