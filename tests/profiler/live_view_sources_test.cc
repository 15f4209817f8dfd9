// Steps marked first by one source, then by a better one (model calls or backward passes
// standing in until the first optimizer step): a warning said of growth within what turns
// out to be one iteration is withdrawn at the first better mark where its site holds less,
// or once it has held no more over the better source's first marks; a leak that goes on
// growing keeps its warning. Calls awaiting the first backward pass warn of nothing.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/live_view.h"
#include "profiler/trace_format.h"

namespace gpumem {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint32_t kPolicyCall = 1;
constexpr auto kModelCall = static_cast<std::uint8_t>(format::StepSource::kModelCall);
constexpr auto kAwaiting =
    static_cast<std::uint8_t>(format::StepSource::kModelCallAwaitingBackward);
constexpr auto kOptimizer = static_cast<std::uint8_t>(format::StepSource::kOptimizerHook);
constexpr auto kBackward = static_cast<std::uint8_t>(format::StepSource::kBackward);

// How long what each call keeps lives: until the update frees it (REINFORCE's
// log-probabilities and their graphs), until the next episode replaces its list (outputs
// kept for an accumulation window's log line), or for ever (a leak).
enum class Kept { kUntilUpdate, kUntilNextEpisode, kForever };

class Episodes {
 public:
  // `calls_source`: what the package says marks the calls.
  explicit Episodes(Kept kept, std::uint8_t calls_source = kModelCall)
      : kept_(kept), calls_source_(calls_source) {}

  // One episode of `calls` model calls, each marked as a step until an optimizer has
  // stepped; then the update, marked by the optimizer. Returns what was said.
  std::string Run(int calls) {
    std::string said;
    if (kept_ == Kept::kUntilNextEpisode) FreeFrom(first_);
    const std::uint64_t first = first_ = addr_;
    for (int call = 0; call < calls; ++call) {
      if (!stepped_ && call > 0) said += view_.OnStep(++step_, calls_source_);
      view_.OnAlloc(0, addr_ += 8 * kMiB, 6 * kMiB, kPolicyCall);
    }
    if (kept_ == Kept::kUntilUpdate) FreeFrom(first);
    stepped_ = true;
    return said + view_.OnStep(++step_, kOptimizer);
  }

 private:
  void FreeFrom(std::uint64_t first) {
    for (std::uint64_t a = first + 8 * kMiB; a <= addr_; a += 8 * kMiB) view_.OnFree(a);
  }

  const Kept kept_;
  const std::uint8_t calls_source_;
  LiveView view_{/*warn_steps=*/5, [](std::uint32_t stack) {
                   return absl::StrCat("reinforce.py:", 20 + stack, " train");
                 }};
  std::uint64_t addr_ = 0;
  std::uint64_t first_ = 0;  // where the last episode's calls began
  std::uint64_t step_ = 0;
  bool stepped_ = false;
};

TEST(LiveViewStepSources, GrowthWithinTheFirstIterationIsWithdrawnAtTheFirstBetterMark) {
  Episodes episodes(Kept::kUntilUpdate);
  const std::string first = episodes.Run(64);
  EXPECT_THAT(first, HasSubstr("gpumem: leak warning at step 7: reinforce.py:21 train"));
  EXPECT_THAT(first, HasSubstr("gpumem: leak warning withdrawn at step 64: reinforce.py:21 "
                               "train holds less (0 B) than when warned of"));
  EXPECT_THAT(first, HasSubstr("now that the steps are marked by optimizer step hooks: what "
                               "it grew by while they were marked by model calls was given "
                               "back"));
  std::string later;
  for (int episode = 0; episode < 40; ++episode) later += episodes.Run(64);
  EXPECT_EQ(later, "");
}

// Sixteen micro-batches a step, their outputs kept until the next window replaces them:
// backward passes mark the first window, and the warning said of it stands at the
// optimizer's first mark (the site holds all it held) and is withdrawn at the next, where
// the window was given back within the step.
TEST(LiveViewStepSources, GrowthWithinTheFirstWindowIsWithdrawnOnceGivenBackWithinAStep) {
  Episodes windows(Kept::kUntilNextEpisode, kBackward);
  std::string said = windows.Run(16);
  EXPECT_THAT(said, HasSubstr("gpumem: leak warning at step 7: reinforce.py:21 train"));
  EXPECT_THAT(said, Not(HasSubstr("withdrawn")));
  said += windows.Run(16);
  EXPECT_THAT(said, HasSubstr("gpumem: leak warning withdrawn at step 17: reinforce.py:21 "
                              "train holds less (0 B) than when warned of (36.00 MiB), now "
                              "that the steps are marked by optimizer step hooks: what it "
                              "grew by while they were marked by backward passes was given "
                              "back"));
  std::string later;
  for (int window = 0; window < 40; ++window) later += windows.Run(16);
  EXPECT_EQ(later, "");
}

// A cache filled in the first window and held from then on: withdrawn once it has held no
// more over two of the optimizer's step ends.
TEST(LiveViewStepSources, GrowthWithinTheFirstWindowIsWithdrawnOnceTheBetterSourceIsFlat) {
  Episodes windows(Kept::kForever, kBackward);
  std::string said = windows.Run(16);
  for (int window = 0; window < 2; ++window) said += windows.Run(0);
  EXPECT_THAT(said, Not(HasSubstr("withdrawn")));
  said += windows.Run(0);
  EXPECT_THAT(said, HasSubstr("gpumem: leak warning at step 7: reinforce.py:21 train"));
  EXPECT_THAT(said, HasSubstr("gpumem: leak warning withdrawn at step 19: reinforce.py:21 "
                              "train has held no more over 2 step ends once the steps were "
                              "marked by optimizer step hooks (live 96.00 MiB): what it grew "
                              "by while they were marked by backward passes came within one "
                              "iteration, not from step to step"));
}

TEST(LiveViewStepSources, CallsAwaitingTheFirstBackwardPassWarnOfNothing) {
  Episodes episodes(Kept::kUntilUpdate, kAwaiting);
  std::string said;
  for (int episode = 0; episode < 10; ++episode) said += episodes.Run(64);
  EXPECT_EQ(said, "");
}

TEST(LiveViewStepSources, ALeakThatGoesOnGrowingKeepsItsWarning) {
  Episodes episodes(Kept::kForever);
  std::string said = episodes.Run(64);
  for (int episode = 0; episode < 10; ++episode) said += episodes.Run(64);
  EXPECT_THAT(said, HasSubstr("gpumem: leak warning at step 7: reinforce.py:21 train"));
  EXPECT_THAT(said, Not(HasSubstr("withdrawn")));
}

}  // namespace
}  // namespace gpumem
