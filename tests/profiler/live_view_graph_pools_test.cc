// CUDA graph pools in the dying process: with the Python package's notes around each
// capture, a graph kept every epoch is warned of at its capture, called from where it is
// kept, for all the memory its pool holds; graphs released in time are not.
#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/graph_pool_note.h"
#include "profiler/live_view.h"
#include "profiler/oom_verdict.h"

namespace gpumem {
namespace {

using format::GraphPoolChange;
using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1 << 20;
enum Stack : std::uint32_t { kParams = 1, kCaptured, kLoss, kBatch };

// The capture's call returned once the loop took the next epoch's batch.
LiveView MakeView() {
  return LiveView(
      /*warn_steps=*/8,
      [](std::uint32_t stack) { return absl::StrCat("train.py:", 40 + stack, " graphed_step"); },
      [](std::uint32_t kept, std::uint32_t other) -> std::string {
        return kept == kCaptured && other == 0 ? "train.py:61 train" : "";
      },
      [](std::uint32_t kept, const std::vector<std::uint32_t>& later) {
        return kept == kCaptured && std::find(later.begin(), later.end(), kBatch) != later.end();
      });
}

// Each epoch (one step) captures into a pool of its own: 127 MiB of activations freed
// inside the capture, a 1 MiB output and a 512-byte loss the graph keeps. `keep`: every
// graph stays alive; else the one before is released once the next is captured.
std::string GraphsCapturedEachEpoch(LiveView& view, int epochs, bool keep) {
  ::testing::internal::CaptureStderr();
  std::string warnings;
  view.OnAlloc(0, 1 << 30, 128 * kMiB, kParams);
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const std::uint64_t pool = (2ull << 30) + static_cast<std::uint64_t>(epoch) * 256 * kMiB;
    const format::GraphPoolId id{static_cast<std::uint64_t>(epoch), 0};
    view.OnAlloc(0, 3ull << 30, kMiB, kBatch);
    view.OnFree(3ull << 30);
    view.OnGraphPool(0, {format::kNewGraphPool, GraphPoolChange::kCaptureBegins});
    view.OnAlloc(0, pool, 127 * kMiB, kCaptured);
    view.OnAlloc(0, pool + 127 * kMiB, kMiB, kCaptured);
    view.OnAlloc(0, pool + 128 * kMiB, 512, kLoss);
    view.OnFree(pool);
    view.OnGraphPool(0, {id, GraphPoolChange::kCaptureEnds});
    if (!keep && epoch > 1) {
      view.OnFree(pool - 256 * kMiB + 127 * kMiB);
      view.OnFree(pool - 128 * kMiB);
      view.OnGraphPool(0, {{static_cast<std::uint64_t>(epoch - 1), 0}, GraphPoolChange::kReleased});
    }
    warnings += view.OnStep(static_cast<std::uint64_t>(epoch));
  }
  ::testing::internal::GetCapturedStderr();
  return warnings;
}

TEST(LiveViewGraphPools, AGraphKeptEveryEpochIsWarnedOfAtItsCaptureCalledFromWhereItIsKept) {
  LiveView view = MakeView();
  const std::string warnings = GraphsCapturedEachEpoch(view, 12, true);
  EXPECT_THAT(warnings, HasSubstr("train.py:42 graphed_step, called from train.py:61 train, grew"));
  EXPECT_THAT(warnings, HasSubstr("+128.00 MiB/step"));
  // The device's figure counts blocks alone: the parameters and each graph's output.
  EXPECT_EQ(view.Live(0), 128 * kMiB + 12 * (kMiB + 512));

  OomVerdictInput in;
  in.figures.allocated = view.Live(0);
  view.Describe(0, &in);
  ASSERT_FALSE(in.sites.empty());
  EXPECT_EQ(in.sites[0].name, "train.py:42 graphed_step, called from train.py:61 train");
  EXPECT_EQ(in.sites[0].live, 12 * (128 * kMiB + 512));  // each pool: all its capture took
  EXPECT_TRUE(in.sites[0].holds_graph_pools);
  in.figures.finished_steps = 12;
  const std::string verdict = OomVerdictText(in, report::OomClass::kLeak);
  EXPECT_THAT(verdict, HasSubstr("held by blocks and CUDA graph pools"));
  EXPECT_THAT(verdict, HasSubstr(std::string("fix: ") + report::kGraphPoolLeakFix));
}

// Threads allocating and freeing while captures begin and end and pools are released (the
// notes come from Python, on any thread): the locks of blocks, pools and keys are taken in
// one order, and the figures add up once everything is freed (run under TSan too).
TEST(LiveViewGraphPools, ThreadsAllocatingWhileCapturesComeAndGo) {
  LiveView view = MakeView();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&view, t] {
      std::uint64_t addr = static_cast<std::uint64_t>(t + 1) << 44;
      for (int i = 0; i < 2000; ++i) {
        const std::uint64_t a = addr += kMiB;
        view.OnAlloc(0, a, 4096, kCaptured);
        view.OnFree(a);
      }
    });
  }
  threads.emplace_back([&view] {
    for (std::uint64_t pool = 1; pool <= 200; ++pool) {
      view.OnGraphPool(0, {format::kNewGraphPool, GraphPoolChange::kCaptureBegins});
      view.OnGraphPool(0, {{pool, 0}, GraphPoolChange::kCaptureEnds});
      view.OnGraphPool(0, {{pool, 0}, GraphPoolChange::kReleased});
    }
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(view.Live(0), 0u);
  OomVerdictInput in;
  view.Describe(0, &in);
  for (const VerdictSite& site : in.sites) EXPECT_EQ(site.live, 0u) << site.name;
}

TEST(LiveViewGraphPools, GraphsReleasedOnceReplacedAreNotWarnedOf) {
  LiveView view = MakeView();
  EXPECT_EQ(GraphsCapturedEachEpoch(view, 12, false), "");
}

}  // namespace
}  // namespace gpumem
