// SiteHistory keeps each site's last kSteps step ends and a coarse series over the whole
// time it was tracked: bounded, evenly spaced, the newest step end in it after each
// halving, and each site's own from the step it was taken in.
#include "profiler/site_history.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace gpumem {
namespace {

constexpr std::uint64_t kSite = 7;
constexpr std::uint64_t kLater = 8;

TEST(SiteHistory, RingHoldsTheLastStepEnds) {
  SiteHistory h;
  for (std::uint64_t step = 1; step <= 100; ++step) h.Add(step, {{kSite, step * 10}}, {});
  const SiteHistory::Series s = h.Of(kSite);
  ASSERT_EQ(s.live.size(), SiteHistory::kSteps);
  EXPECT_EQ(s.steps.front(), 100.0 - SiteHistory::kSteps + 1);
  EXPECT_EQ(s.live.back(), 1000u);
}

TEST(SiteHistory, CoarseSeriesSpansTheWholeRunEvenly) {
  SiteHistory h;
  for (std::uint64_t step = 1; step <= 1000; ++step) {
    h.Add(step, {{kSite, step * 10}}, {});
    const SiteHistory::Series s = h.CoarseOf(kSite);
    ASSERT_LT(s.live.size(), SiteHistory::kSteps) << "step " << step;
    ASSERT_FALSE(s.live.empty());
    for (std::size_t i = 0; i < s.live.size(); ++i) {
      ASSERT_EQ(s.live[i], static_cast<std::uint64_t>(s.steps[i]) * 10) << "step " << step;
    }
    for (std::size_t i = 2; i < s.steps.size(); ++i) {
      ASSERT_EQ(s.steps[i] - s.steps[i - 1], s.steps[1] - s.steps[0]) << "step " << step;
    }
  }
  const SiteHistory::Series s = h.CoarseOf(kSite);
  EXPECT_LE(s.steps.front(), 64.0);  // the run's start is still covered
  EXPECT_GE(s.steps.back(), 1000.0 - 64);
}

// A site taken in late in a long run gets a coarse series of its own, from the step it
// appeared, as fine as its age allows: a leak that begins after 1,800 healthy steps has
// as many samples over its 300 steps as it would have had from the run's start.
TEST(SiteHistory, SiteTakenInLateIsSampledAsFinelyAsItsAge) {
  SiteHistory h;
  SiteHistory young;
  for (std::uint64_t step = 1; step <= 2100; ++step) {
    absl::flat_hash_map<std::uint64_t, std::uint64_t> live = {{kSite, 1}};
    if (step > 1800) live[kLater] = step;
    h.Add(step, live, {});
    if (step > 1800) young.Add(step - 1800, {{kLater, step}}, {});
  }
  const SiteHistory::Series later = h.CoarseOf(kLater);
  const SiteHistory::Series alone = young.CoarseOf(kLater);
  ASSERT_EQ(later.live.size(), alone.live.size());
  for (std::size_t i = 0; i < later.live.size(); ++i) {
    EXPECT_EQ(later.steps[i], alone.steps[i] + 1800);
    EXPECT_EQ(later.live[i], static_cast<std::uint64_t>(later.steps[i]));
  }
  EXPECT_GE(later.live.size(), 16u);
  const double stride = later.steps[1] - later.steps[0];
  EXPECT_LE(later.steps.front(), 1800.0 + stride);  // from its first step end on
  EXPECT_GT(later.steps.back(), 2100.0 - stride);   // to its last
}

}  // namespace
}  // namespace gpumem
