// What counts as a leak's growth in a site's step-end series (verdict_rules.h): a steady
// rise, or a staircase that rises in every part of the run; not noise, and not the few
// one-off rises of memory that is made once or fills up and stops.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr double kMinGrowth = 1 << 20;

// Step numbers 0..n-1 beside a series of n step-end samples.
std::vector<double> StepsOf(const std::vector<std::uint64_t>& live) {
  std::vector<double> steps;
  for (std::size_t i = 0; i < live.size(); ++i) steps.push_back(static_cast<double>(i));
  return steps;
}

std::optional<Growth> GrowthOf(const std::vector<std::uint64_t>& live) {
  return RecentSteadyGrowth(StepsOf(live), live, kMinGrowth);
}

// `base` plus `jump` at every step that `kept(step)` says keeps something.
template <typename Kept>
std::vector<std::uint64_t> Series(std::size_t n, std::uint64_t jump, Kept kept) {
  std::vector<std::uint64_t> live;
  std::uint64_t now = 100 * kMiB;
  for (std::size_t i = 0; i < n; ++i) {
    if (kept(i)) now += jump;
    live.push_back(now);
  }
  return live;
}

TEST(GrowthRules, SteadyRiseIsGrowth) {
  const auto g = GrowthOf(Series(50, 2 * kMiB, [](std::size_t) { return true; }));
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(g->bytes_per_step, 2.0 * kMiB, 1.0);
}

TEST(GrowthRules, StaircaseEveryTenthStepIsGrowth) {
  const auto g = GrowthOf(Series(400, 32 * kMiB, [](std::size_t i) { return i % 10 == 5; }));
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(g->bytes_per_step, 3.2 * kMiB, 0.1 * kMiB);
  EXPECT_LT(g->rising_share, 0.2);
}

// A GAN's two optimizers each end a step, and its kept batch is held at alternate step
// ends only: +8, -4 at each pair, as a snapshot of one read (8, 4, 12, 8, 16, ...).
TEST(GrowthRules, ZigZagUpOfALoopOfTwoPhasesIsGrowth) {
  std::vector<std::uint64_t> live;
  for (std::uint64_t i = 0; i < 200; ++i) live.push_back((100 + 4 * i + (i % 2 == 0 ? 4 : 0)) * kMiB);
  const auto g = GrowthOf(live);
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(g->bytes_per_step, 4.0 * kMiB, 0.1 * kMiB);
}

// The same two phases with nothing kept: down and up by the same amount is not growth.
TEST(GrowthRules, ZigZagAroundAFlatLineIsNot) {
  std::vector<std::uint64_t> live;
  for (std::uint64_t i = 0; i < 200; ++i) live.push_back((100 + (i % 2 == 0 ? 4 : 0)) * kMiB);
  EXPECT_FALSE(GrowthOf(live).has_value());
}

TEST(GrowthRules, NoiseAroundAFlatLineIsNot) {
  std::mt19937 random(7);
  std::uniform_int_distribution<std::uint64_t> size(0, 64 * kMiB);
  std::vector<std::uint64_t> live;
  for (int i = 0; i < 300; ++i) live.push_back(100 * kMiB + size(random));
  EXPECT_FALSE(GrowthOf(live).has_value());
}

TEST(GrowthRules, OneCopyMadeOnceIsNot) {
  EXPECT_FALSE(GrowthOf(Series(1500, 64 * kMiB, [](std::size_t i) { return i == 500; })));
}

TEST(GrowthRules, TwoCopiesMadeOnceAreNot) {
  EXPECT_FALSE(
      GrowthOf(Series(1500, 64 * kMiB, [](std::size_t i) { return i == 500 || i == 1000; })));
}

TEST(GrowthRules, CacheThatFillsAndStopsIsNot) {
  EXPECT_FALSE(GrowthOf(Series(1500, 8 * kMiB, [](std::size_t i) { return i < 16; })));
}

// A buffer grown to the longest batch so far: new records come ever more rarely.
TEST(GrowthRules, BufferGrownForTheLongestBatchSoFarIsNot) {
  std::mt19937 random(11);
  std::uniform_int_distribution<std::uint64_t> length(1, 1 << 20);
  std::uint64_t longest = 0;
  std::vector<std::uint64_t> live;
  for (int i = 0; i < 1500; ++i) {
    longest = std::max(longest, length(random));
    live.push_back(100 * kMiB + longest * 512);
  }
  EXPECT_FALSE(GrowthOf(live).has_value());
}

// Where the staircase sometimes gives memory back, it is not called growth by the
// staircase rule (a steady rise that falls now and then still is, by the first rule).
TEST(GrowthRules, StaircaseThatFallsOftenIsNot) {
  std::vector<std::uint64_t> live =
      Series(400, 32 * kMiB, [](std::size_t i) { return i % 10 == 5; });
  for (std::size_t i = 7; i < live.size(); i += 10) live[i] -= 16 * kMiB;
  EXPECT_FALSE(GrowthOf(live).has_value());
}

// Epochs of `train` flat step ends, each followed by a pass of `pass` step ends that
// gathers `per_call` at each, given back when the pass ends; the series ends inside the
// last pass, whose calls gather `last_per_call`.
std::vector<std::uint64_t> EpochsWithGatheringPasses(std::uint64_t per_call,
                                                     std::uint64_t last_per_call) {
  constexpr int kEpochs = 6, kTrain = 200, kPass = 32;
  std::vector<std::uint64_t> live;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (int i = 0; i < kTrain; ++i) live.push_back(100 * kMiB);
    const std::uint64_t gathered = epoch + 1 == kEpochs ? last_per_call : per_call;
    for (int i = 1; i <= kPass; ++i) live.push_back(100 * kMiB + i * gathered);
  }
  return live;
}

// The run ends as its last pass has gathered as much as each pass before it gave back:
// no leak, though the end of the series rises steadily.
TEST(GrowthRules, PassThatGathersAndGivesBackEachEpochIsNot) {
  EXPECT_FALSE(GrowthOf(EpochsWithGatheringPasses(8 * kMiB, 8 * kMiB)).has_value());
}

// The last pass gathers three times what the others gave back: more than ever held.
TEST(GrowthRules, PassGatheringFarMoreThanEverGivenBackIs) {
  const auto g = GrowthOf(EpochsWithGatheringPasses(8 * kMiB, 24 * kMiB));
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(g->bytes_per_step, 24.0 * kMiB, 4.0 * kMiB);
}

// A caller that has seen more of the site than the series it fits passes its FillLevel:
// a rise seen alone is a refill once the fill level says the site held it and let it go.
TEST(GrowthRules, FillLevelKeptByTheCallerDecides) {
  const std::vector<std::uint64_t> rise = Series(16, 8 * kMiB, [](std::size_t) { return true; });
  FillLevel fill;
  EXPECT_TRUE(RecentSteadyGrowth(StepsOf(rise), rise, kMinGrowth, &fill).has_value());
  for (std::uint64_t live : {100 * kMiB, 300 * kMiB, 100 * kMiB}) fill.Add(live);
  EXPECT_FALSE(RecentSteadyGrowth(StepsOf(rise), rise, kMinGrowth, &fill).has_value());
  fill.Add(400 * kMiB);  // held more since, and has not given it back
  EXPECT_TRUE(RecentSteadyGrowth(StepsOf(rise), rise, kMinGrowth, &fill).has_value());
}

}  // namespace
// A helper's kept blocks tell a queue when the loop allocated meanwhile or when seven in
// eight are of one size; a transformer's activations at one line are about two in three.
TEST(HelperKeptRule, AQueueIsManyBlocksAlikeOrKeptWhileTheLoopAllocated) {
  constexpr std::uint64_t kMiB = 1 << 20;
  EXPECT_TRUE(KeptByHelper({.bytes = 320 * kMiB, .blocks = 40, .main_allocs = 0,
                            .first_size_blocks = 35}));
  EXPECT_FALSE(KeptByHelper({.bytes = 320 * kMiB, .blocks = 40, .main_allocs = 0,
                             .first_size_blocks = 34}));
  EXPECT_TRUE(KeptByHelper({.bytes = 320 * kMiB, .blocks = 40, .main_allocs = kMinLoopAllocs,
                            .first_size_blocks = 1}));
  EXPECT_FALSE(KeptByHelper({.bytes = 248 * kMiB, .blocks = kMinHelperKeptBlocks - 1,
                             .main_allocs = 100, .first_size_blocks = 31}));
}

// A thread that stopped while the training allocated half as much as it holds is waiting
// for the loop: a bounded queue, full.
TEST(HelperKeptRule, AThreadWaitingForTheLoopKeepsNothing) {
  constexpr std::uint64_t kMiB = 1 << 20;
  const HelperKept queue = {.bytes = 320 * kMiB, .blocks = 40, .first_size_blocks = 40};
  HelperKept later = queue;
  later.loop_bytes_since_last = 159 * kMiB;
  EXPECT_TRUE(KeptByHelper(later));
  later.loop_bytes_since_last = 160 * kMiB;
  EXPECT_FALSE(KeptByHelper(later));
}

// The cap had room for the request, the device did not: what other processes (or unusual
// libraries of this one) held is why, where giving it back would have made the room.
TEST(HeldOutsideRule, TheDeviceFullOfOthersMemoryUnderTheCap) {
  constexpr std::uint64_t kMiB = 1 << 20;
  OomFigures f;
  f.allocated = 129 * kMiB;
  f.request = 32 * kMiB;
  f.capacity = 4096 * kMiB;
  f.device_free = 27 * kMiB;
  f.held_outside = 138 * 1024 * kMiB;
  EXPECT_TRUE(HeldOutsideExplains(f));
  EXPECT_EQ(ClassifyOom(f), OomClass::kHeldOutside);
  OomFigures room = f;  // the driver had the request: the allocator's own doing
  room.device_free = 32 * kMiB;
  EXPECT_FALSE(HeldOutsideExplains(room));
  room.headroom = 256 * kMiB;  // but not gpumem's headroom on top of it
  EXPECT_TRUE(HeldOutsideExplains(room));
  OomFigures capped = f;  // the cap was what refused it
  capped.allocated = 4080 * kMiB;
  EXPECT_FALSE(HeldOutsideExplains(capped));
  capped.capacity_known = false;  // a stand-in for a cap refuses nothing
  EXPECT_TRUE(HeldOutsideExplains(capped));
  OomFigures alone = f;  // nothing held outside: not its cause
  alone.held_outside = 0;
  EXPECT_FALSE(HeldOutsideExplains(alone));
  OomFigures too_little = f;  // given back, still no room
  too_little.held_outside = 4 * kMiB;
  EXPECT_FALSE(HeldOutsideExplains(too_little));
  OomFigures unsaid = f;  // the driver did not say
  unsaid.device_free.reset();
  EXPECT_FALSE(HeldOutsideExplains(unsaid));
}

// A leak comes first: the growth is what to fix.
TEST(HeldOutsideRule, ALeakStaysALeak) {
  constexpr std::uint64_t kMiB = 1 << 20;
  OomFigures f;
  f.finished_steps = 100;
  f.allocated = 4000 * kMiB;
  f.request = 200 * kMiB;
  f.capacity = 4096 * kMiB;
  f.growth_suspected = true;
  f.grown_bytes = 3000 * kMiB;
  f.capacity_known = false;
  f.device_free = 0;
  f.held_outside = 1024 * kMiB;
  EXPECT_EQ(ClassifyOom(f), OomClass::kLeak);
}

// A leak that ran out with much of PyTorch's cache free in pieces (figures of a run on a
// whole H200): still a leak, and the evidence says the pieces brought the OOM early.
TEST(LeakCutShortRule, PiecesOfTheCacheBringALeaksOomEarly) {
  constexpr std::uint64_t kMiB = 1 << 20;
  OomFigures f;
  f.finished_steps = 1072;
  f.allocated = 77'655 * kMiB;
  f.request = 72 * kMiB;
  f.capacity = 143'155 * kMiB;
  f.free_cached = 64'732 * kMiB;
  f.largest_free = 60 * kMiB;
  f.growth_suspected = true;
  f.grown_bytes = 76'930 * kMiB;
  EXPECT_EQ(ClassifyOom(f), OomClass::kLeak);
  EXPECT_EQ(LeakCutShortText(f, 72.0 * kMiB, "step", "steps"),
            "; the cache also held 63.21 GiB free, in pieces of at most 60.00 MiB "
            "(fragmentation), which brought this OOM about 899 steps early");
  OomFigures unsaid = f;  // profile-only mode's dying process: the piece is not known
  unsaid.largest_free.reset();
  EXPECT_NE(LeakCutShortText(unsaid, 72.0 * kMiB, "pass", "passes")
                .find("in pieces too small for the request (fragmentation), which brought this "
                      "OOM about 899 passes early"),
            std::string::npos);
  OomFigures whole = f;  // a free piece could have served it: not pieces
  whole.largest_free = 80 * kMiB;
  EXPECT_EQ(LeakCutShortText(whole, 72.0 * kMiB, "step", "steps"), "");
  OomFigures little = f;  // under 5% of the cap free: not worth saying
  little.free_cached = 7'000 * kMiB;
  EXPECT_EQ(LeakCutShortText(little, 72.0 * kMiB, "step", "steps"), "");
  EXPECT_EQ(LeakCutShortText(f, 0, "step", "steps"), "");  // no steady growth to count with
  // Less free than one step's growth: the leak would have run out at the same step.
  EXPECT_EQ(LeakCutShortText(f, 70'000.0 * kMiB, "step", "steps"), "");
}

}  // namespace gpumem::report
