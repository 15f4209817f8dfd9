// Loops that nothing marks, in the dying process: passes found in the allocations stand
// in for steps at an OOM (PassFinder, LiveView), and go once a step is marked.
#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/live_view.h"
#include "profiler/oom_verdict.h"
#include "profiler/pass_finder.h"

namespace gpumem {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1 << 20;
enum Stack : std::uint32_t { kPoints = 1, kDistances, kKept, kSums };

LiveView MakeView() {
  return LiveView(/*warn_steps=*/8, [](std::uint32_t stack) {
    return absl::StrCat("kmeans.py:", 10 + stack, " kmeans");
  });
}

// Lloyd's k-means in plain tensor operations: each pass's distances and sums come and
// go, and (`keep`) 800 KB of each pass's nearest distances are kept. Returns the warnings
// said before each allocation, as the recorder says them (TakePassWarnings), and checks
// that nothing was printed from the allocations themselves.
std::string KMeansPasses(LiveView& view, int passes, std::uint64_t& addr, bool keep = true) {
  ::testing::internal::CaptureStderr();
  std::string said;
  for (int pass = 0; pass < passes; ++pass) {
    said += view.TakePassWarnings();
    const std::uint64_t distances = addr += 256 * kMiB;
    view.OnAlloc(0, distances, 200 * kMiB, kDistances);
    const std::uint64_t nearest = addr += 256 * kMiB;
    view.OnAlloc(0, nearest, 800'000, kKept);
    const std::uint64_t sums = addr += 256 * kMiB;
    view.OnAlloc(0, sums, 64 << 10, kSums);
    view.OnFree(distances);
    view.OnFree(sums);
    if (!keep) view.OnFree(nearest);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  return said;
}

TEST(PassFinder, TheFirstStackAtASteadyIntervalStartsEachPass) {
  PassFinder finder;
  int passes = 0;
  for (int pass = 0; pass < 20; ++pass) {
    for (std::uint32_t stack : {5u, 6u, 7u}) passes += finder.Add(stack) == PassFinder::Seen::kPass;
  }
  ASSERT_TRUE(finder.found());
  EXPECT_EQ(finder.anchor(), 5u);
  EXPECT_EQ(passes, 20 - 1 - static_cast<int>(PassFinder::kSteadyGaps));
}

TEST(PassFinder, AStackThatAllocatesEveryTimeIsNoPass) {
  PassFinder finder;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(finder.Add(9), PassFinder::Seen::kNothing);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(finder.Add(0), PassFinder::Seen::kNothing);
  EXPECT_FALSE(finder.found());
}

// An inner loop of three allocations, run four times in each pass of an outer loop that
// allocates once more: the outer loop's stack, twice as far apart or more, takes over.
TEST(PassFinder, AnOuterLoopTakesOverFromTheInnerOne) {
  PassFinder finder;
  for (int outer = 0; outer < 30; ++outer) {
    finder.Add(20);
    for (int inner = 0; inner < 4; ++inner) {
      for (std::uint32_t stack : {21u, 22u, 23u}) finder.Add(stack);
    }
  }
  ASSERT_TRUE(finder.found());
  EXPECT_EQ(finder.anchor(), 20u);
}

TEST(LiveViewPasses, ALeakInALoopNothingMarksIsMeasuredPerPass) {
  LiveView view = MakeView();
  std::uint64_t addr = 0;
  view.OnAlloc(0, addr += 256 * kMiB, 50 * kMiB, kPoints);
  const std::string said = KMeansPasses(view, 200, addr);
  // Warned of once the kept bytes rose at each of 8 pass ends (9 samples), by 1 MiB at least.
  EXPECT_THAT(said, HasSubstr("gpumem: leak warning at pass 9: kmeans.py:13 kmeans grew at "
                              "each of the last 8 pass ends, +781.50 KiB/pass"));
  OomVerdictInput in;
  view.Describe(0, &in);
  EXPECT_EQ(in.pass_start, "kmeans.py:12 kmeans");
  EXPECT_EQ(in.figures.finished_steps, 200u - 1 - PassFinder::kSteadyGaps);
  ASSERT_FALSE(in.sites.empty());
  EXPECT_EQ(in.sites[0].name, "kmeans.py:13 kmeans");
  EXPECT_NEAR(in.sites[0].bytes_per_step, 800'000.0, 512.0);  // a 512 B block's rounding
  // The next pass's distances do not fit, where they would without what was kept.
  in.figures.allocated = view.Live(0);
  in.figures.capacity = in.figures.allocated + 100 * kMiB;
  in.figures.request = 200 * kMiB;
  const std::string text = OomVerdictText(in, report::ClassifyOom(in.figures));
  EXPECT_THAT(text, HasSubstr("verdict: leak"));
  EXPECT_THAT(text, HasSubstr("per pass over the last"));
  EXPECT_THAT(text, HasSubstr("a pass starts at each allocation from kmeans.py:12 kmeans"));
  EXPECT_THAT(text, HasSubstr("/pass"));
}

// An allocation comes under the allocator's lock: naming a site (which may symbolize) and
// warning (a write to stderr, which a full pipe blocks) wait for the recorder's call
// before the next allocation, where no lock is held.
TEST(LiveViewPasses, AllocationsNeitherNameSitesNorWarn) {
  bool allocating = false;
  int named_while_allocating = 0;
  LiveView view(8, [&](std::uint32_t stack) {
    named_while_allocating += allocating;
    return absl::StrCat("kmeans.py:", 10 + stack, " kmeans");
  });
  std::uint64_t addr = 0;
  std::string said;
  ::testing::internal::CaptureStderr();
  view.OnAlloc(0, addr += 256 * kMiB, 50 * kMiB, kPoints);
  for (int pass = 0; pass < 50; ++pass) {
    said += view.TakePassWarnings();
    allocating = true;
    const std::uint64_t distances = addr += 256 * kMiB, sums = addr += 256 * kMiB;
    view.OnAlloc(0, distances, 200 * kMiB, kDistances);
    view.OnAlloc(0, addr += 256 * kMiB, 800'000, kKept);
    view.OnAlloc(0, sums, 64 << 10, kSums);
    allocating = false;
    view.OnFree(distances);
    view.OnFree(sums);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(named_while_allocating, 0);
  EXPECT_THAT(said, HasSubstr("gpumem: leak warning at pass"));
}

TEST(LiveViewPasses, ALoopThatKeepsNothingIsNotWarnedOf) {
  LiveView view = MakeView();
  std::uint64_t addr = 0;
  EXPECT_EQ(KMeansPasses(view, 200, addr, /*keep=*/false), "");
}

// A model written as a function, trained with torch.func.grad and called again for a list
// the loop keeps: both calls allocate at its line (one site, two stacks). The verdict names
// the call the kept outputs came through, and so does the early warning.
TEST(LiveViewPasses, AGrowingSiteNamesTheCallItsKeptBlocksCameThrough) {
  enum : std::uint32_t { kBatch = 1, kForwardInGrad, kForwardKept };
  LiveView view(
      8, [](std::uint32_t stack) { return stack == kBatch ? "f.py:9 batch" : "f.py:3 forward"; },
      [](std::uint32_t kept, std::uint32_t other) {
        return kept == kForwardKept && other == kForwardInGrad ? "f.py:15 <module>" : "";
      });
  std::uint64_t addr = 0;
  std::string said;
  for (int step = 0; step < 100; ++step) {
    said += view.TakePassWarnings();
    const std::uint64_t x = addr += 64 * kMiB, out = addr += 64 * kMiB;
    view.OnAlloc(0, x, 8 * kMiB, kBatch);
    view.OnAlloc(0, out, 8 * kMiB, kForwardInGrad);
    view.OnFree(out);
    view.OnAlloc(0, addr += 64 * kMiB, 8 * kMiB, kForwardKept);
    view.OnFree(x);
  }
  EXPECT_THAT(said, HasSubstr(": f.py:3 forward, called from f.py:15 <module>, grew at each of"));
  OomVerdictInput in;
  view.Describe(0, &in);
  ASSERT_FALSE(in.sites.empty());
  EXPECT_EQ(in.sites[0].name, "f.py:3 forward, called from f.py:15 <module>");
  EXPECT_GT(in.sites[0].bytes_per_step, 0.0);
}

// A training step written as a helper that returns its output, every call from one line
// of the loop, which keeps each output: nothing tells the kept blocks apart, but the loop
// takes the next batch while they stay (the call returned), so the warning and the
// verdict name the helper's caller. The stacks asked about are those that allocated after
// the kept blocks' first: the batch, not the model built before the loop.
TEST(LiveViewPasses, AHelpersKeptOutputIsNamedWithItsCaller) {
  enum : std::uint32_t { kParams = 1, kBatch, kStep };
  std::vector<std::uint32_t> asked;
  LiveView view(
      8, [](std::uint32_t stack) { return stack == kStep ? "f.py:42 train_step" : "f.py:9 other"; },
      [](std::uint32_t kept, std::uint32_t other) {
        return kept == kStep && other == 0 ? "f.py:60 train" : "";
      },
      [&asked](std::uint32_t kept, const std::vector<std::uint32_t>& later) {
        asked = later;
        return kept == kStep && std::find(later.begin(), later.end(), kBatch) != later.end();
      });
  std::uint64_t addr = 0;
  std::string said;
  view.OnAlloc(0, addr += 64 * kMiB, 32 * kMiB, kParams);
  said += view.OnStep(1);
  for (int step = 2; step <= 100; ++step) {
    const std::uint64_t x = addr += 64 * kMiB;
    view.OnAlloc(0, x, 4 * kMiB, kBatch);
    view.OnAlloc(0, addr += 64 * kMiB, 8 * kMiB, kStep);
    view.OnFree(x);
    said += view.OnStep(step);
  }
  EXPECT_THAT(said, HasSubstr(": f.py:42 train_step, called from f.py:60 train, grew at each of"));
  EXPECT_EQ(asked, std::vector<std::uint32_t>{kBatch});
  OomVerdictInput in;
  view.Describe(0, &in);
  ASSERT_FALSE(in.sites.empty());
  EXPECT_EQ(in.sites[0].name, "f.py:42 train_step, called from f.py:60 train");
}

// Of many stacks allocated since, the most recent are asked (2,000 at most): naming a
// native frame costs a lookup, and the stacks that tell come every step.
TEST(LiveViewPasses, TheMostRecentStacksAreAskedWhetherACallReturned) {
  constexpr std::uint32_t kStep = 1, kFirstOther = 100, kOthers = 2100;
  std::vector<std::uint32_t> asked;
  LiveView view(
      8, [](std::uint32_t stack) { return absl::StrCat("f.py:", stack, " f"); },
      [](std::uint32_t, std::uint32_t) { return std::string("f.py:60 train"); },
      [&asked](std::uint32_t, const std::vector<std::uint32_t>& later) {
        asked = later;
        return true;
      });
  std::uint64_t addr = 0;
  for (std::uint32_t step = 1; step <= 40; ++step) {
    view.OnAlloc(0, addr += 64 * kMiB, 8 * kMiB, kStep);
    // Other stacks, each once, in order: the last ones are the most recent.
    for (std::uint32_t i = (step - 1) * kOthers / 40; i < step * kOthers / 40; ++i) {
      const std::uint64_t at = addr += 64 * kMiB;
      view.OnAlloc(0, at, 1 << 10, kFirstOther + i);
      view.OnFree(at);
    }
    view.OnStep(step);
  }
  OomVerdictInput in;
  view.Describe(0, &in);
  ASSERT_EQ(asked.size(), 2000u);
  EXPECT_NE(std::find(asked.begin(), asked.end(), kFirstOther + kOthers - 1), asked.end());
  // Those of the first step are no later than the site's first block; of the next step's,
  // the first few are the oldest past the 2,000.
  EXPECT_EQ(std::find(asked.begin(), asked.end(), kFirstOther + kOthers / 40), asked.end());
}

// The same, where no later stack shows the call returned (the loop's own function): the
// site is named alone.
TEST(LiveViewPasses, ASiteWhoseCallNeverReturnedIsNamedAlone) {
  LiveView view(
      8, [](std::uint32_t) { return "f.py:50 train"; },
      [](std::uint32_t, std::uint32_t) { return std::string("f.py:85 main"); },
      [](std::uint32_t, const std::vector<std::uint32_t>&) { return false; });
  std::uint64_t addr = 0;
  std::string said;
  for (int step = 1; step <= 100; ++step) {
    view.OnAlloc(0, addr += 64 * kMiB, 8 * kMiB, 1);
    said += view.OnStep(step);
  }
  EXPECT_THAT(said, HasSubstr(": f.py:50 train grew at each of"));
}

// Passes found while the model loads or warms up are dropped at the first step marked:
// the steps are the unit from then on.
TEST(LiveViewPasses, TheFirstStepMarkedDropsThePasses) {
  LiveView view = MakeView();
  std::uint64_t addr = 0;
  KMeansPasses(view, 100, addr);
  EXPECT_EQ(view.OnStep(1), "");
  KMeansPasses(view, 100, addr);  // found again: not counted, a step was marked
  OomVerdictInput in;
  in.figures.finished_steps = 1;
  view.Describe(0, &in);
  EXPECT_EQ(in.pass_start, "");
  EXPECT_EQ(in.figures.finished_steps, 1u);
  ASSERT_FALSE(in.sites.empty());
  EXPECT_EQ(in.growth_per_step, 0.0);
}

// An accumulation window's micro-batches before the optimizer's first step: the package
// says steps are coming, and what the window keeps until its step is no pass's growth.
TEST(LiveViewPasses, NoPassesOnceStepsAreComing) {
  LiveView view = MakeView();
  std::uint64_t addr = 0;
  view.StepsComing();
  EXPECT_EQ(KMeansPasses(view, 100, addr), "");
  OomVerdictInput in;
  view.Describe(0, &in);
  EXPECT_EQ(in.pass_start, "");
  EXPECT_EQ(in.figures.finished_steps, 0u);
  EXPECT_EQ(view.OnStep(1), "");
}

// Threads allocating at once before any mark (the allocator's and PyTorch's callbacks come
// from whichever thread allocates), and one marking a step meanwhile: passes are looked
// for under the view's lock, and whatever was found before the mark goes at it (run under
// TSan too).
TEST(LiveViewPasses, ThreadsAllocatingWhileAStepIsMarked) {
  LiveView view = MakeView();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&view, t] {
      std::uint64_t addr = static_cast<std::uint64_t>(t + 1) << 44;
      for (int pass = 0; pass < 500; ++pass) {
        const std::uint64_t a = addr += kMiB, b = addr += kMiB;
        view.OnAlloc(0, a, 4096, kDistances);
        view.OnAlloc(0, b, 4096, kSums);
        view.OnFree(a);
        view.OnFree(b);
      }
    });
  }
  threads.emplace_back([&view] { view.OnStep(1); });
  for (std::thread& t : threads) t.join();
  OomVerdictInput in;
  in.figures.finished_steps = 1;
  view.Describe(0, &in);
  EXPECT_EQ(in.pass_start, "");
  EXPECT_EQ(in.figures.finished_steps, 1u);
}

// When the main thread's activations come against the thread's blocks.
enum class LoopOrder {
  kBeside,         // one after each block
  kStillFilling,   // after 36 of them, one block after each tenth activation (a first
                   // step that compiles, its loader still filling)
  kAfterAllBlocks  // after all of them (a bounded queue full before the step)
};

// A first iteration that dies: the parameters, then 40 rounds in which a thread in
// `role` allocates a block at one line (8 MiB, or with `weights` four sizes in turn) and
// the main thread a 4 MiB activation at a line of its own, in `order`. No step ends.
// Returns the verdict for a 128 MiB request on a device with 320 MiB cached free in 8
// MiB pieces.
std::string HelperRounds(ThreadRole role, LoopOrder order, bool weights = false) {
  constexpr std::uint32_t kParams = 1, kBatch = 2, kFirstLayer = 10;
  constexpr std::uint64_t kWeightSizes[] = {8 * kMiB, 8 * kMiB, 2 * kMiB, 12 * kMiB};
  LiveView view(/*warn_steps=*/8, [](std::uint32_t stack) {
    return stack == kBatch ? std::string("train.py:30 load")
                           : absl::StrCat("train.py:", stack, " forward");
  });
  std::uint64_t addr = 1ull << 30;
  view.OnAlloc(0, addr, 128 * kMiB, kParams);
  auto main_round = [&](int round) {
    view.OnAlloc(0, addr += 64 * kMiB, 4 * kMiB, kFirstLayer + round);
  };
  auto thread_block = [&](int round) {
    view.OnAlloc(0, addr += 64 * kMiB, weights ? kWeightSizes[round % 4] : 8 * kMiB, kBatch,
                 role);
  };
  const int still_filling = order == LoopOrder::kStillFilling ? 4 : 0;
  for (int round = 0; round < 40 - still_filling; ++round) {
    thread_block(round);
    if (order == LoopOrder::kBeside) main_round(round);
  }
  for (int round = 0; order != LoopOrder::kBeside && round < 40; ++round) {
    main_round(round);
    if (still_filling > 0 && round % 10 == 9) thread_block(round);
  }
  OomVerdictInput in;
  view.Describe(0, &in);
  EXPECT_LT(in.figures.finished_steps, report::kMinStepsForLeak);
  in.figures.allocated = view.Live(0);
  in.figures.capacity = 1024 * kMiB;
  in.figures.request = 128 * kMiB;
  in.figures.free_cached = 320 * kMiB;
  in.figures.largest_free = 8 * kMiB;
  return OomVerdictText(in, report::ClassifyOom(in.figures));
}

// Beside the loop, or mostly before it allocates again (a first step that compiles).
TEST(LiveViewHelperThreads, BatchesAHelperQueuedAreALeakBeforeAnyStep) {
  for (const LoopOrder order : {LoopOrder::kBeside, LoopOrder::kStillFilling}) {
    const std::string text = HelperRounds(ThreadRole::kHelper, order);
    EXPECT_THAT(text, HasSubstr("verdict: leak"));
    EXPECT_THAT(text, HasSubstr("a thread other than the loop's kept 40 blocks (320.00 MiB) "
                                "at train.py:30 load, which the loop had not taken"));
    EXPECT_THAT(text, HasSubstr(std::string("fix: ") + report::kHelperKeptFix));
  }
}

// Weights loaded, a bounded queue full before the step (which then allocated half as much
// as the queue holds), a backward thread's blocks.
TEST(LiveViewHelperThreads, WeightsAPoolLoadedAFullQueueAndBackwardsBlocksAreNoLeak) {
  EXPECT_THAT(HelperRounds(ThreadRole::kHelper, LoopOrder::kAfterAllBlocks, /*weights=*/true),
              HasSubstr("verdict: fragmentation"));
  EXPECT_THAT(HelperRounds(ThreadRole::kHelper, LoopOrder::kAfterAllBlocks),
              HasSubstr("verdict: fragmentation"));
  EXPECT_THAT(HelperRounds(ThreadRole::kBackward, LoopOrder::kBeside),
              HasSubstr("verdict: fragmentation"));
}

}  // namespace
}  // namespace gpumem
