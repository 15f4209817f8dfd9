// Steps marked first by one source, then by a better one (model calls standing in until
// the first optimizer step): a warning said of growth within what turns out to be one
// iteration is withdrawn at the first better mark where its site holds less; a leak that
// goes on growing keeps its warning. Calls awaiting the first backward pass warn of
// nothing.
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

class Episodes {
 public:
  // `keep`: what each model call keeps stays past the update (a leak), else the update
  // frees it (REINFORCE's log-probabilities and their graphs).
  // `calls_source`: what the package says marks the calls.
  explicit Episodes(bool keep, std::uint8_t calls_source = kModelCall)
      : keep_(keep), calls_source_(calls_source) {}

  // One episode of `calls` model calls, each marked as a step until an optimizer has
  // stepped; then the update, marked by the optimizer. Returns what was said.
  std::string Run(int calls) {
    std::string said;
    const std::uint64_t first = addr_;
    for (int call = 0; call < calls; ++call) {
      if (!stepped_ && call > 0) said += view_.OnStep(++step_, calls_source_);
      view_.OnAlloc(0, addr_ += 8 * kMiB, 6 * kMiB, kPolicyCall);
    }
    if (!keep_) {
      for (std::uint64_t a = first + 8 * kMiB; a <= addr_; a += 8 * kMiB) view_.OnFree(a);
    }
    stepped_ = true;
    return said + view_.OnStep(++step_, kOptimizer);
  }

 private:
  const bool keep_;
  const std::uint8_t calls_source_;
  LiveView view_{/*warn_steps=*/5, [](std::uint32_t stack) {
                   return absl::StrCat("reinforce.py:", 20 + stack, " train");
                 }};
  std::uint64_t addr_ = 0;
  std::uint64_t step_ = 0;
  bool stepped_ = false;
};

TEST(LiveViewStepSources, GrowthWithinTheFirstIterationIsWithdrawnAtTheFirstBetterMark) {
  Episodes episodes(/*keep=*/false);
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

TEST(LiveViewStepSources, CallsAwaitingTheFirstBackwardPassWarnOfNothing) {
  Episodes episodes(/*keep=*/false, kAwaiting);
  std::string said;
  for (int episode = 0; episode < 10; ++episode) said += episodes.Run(64);
  EXPECT_EQ(said, "");
}

TEST(LiveViewStepSources, ALeakThatGoesOnGrowingKeepsItsWarning) {
  Episodes episodes(/*keep=*/true);
  std::string said = episodes.Run(64);
  for (int episode = 0; episode < 10; ++episode) said += episodes.Run(64);
  EXPECT_THAT(said, HasSubstr("gpumem: leak warning at step 7: reinforce.py:21 train"));
  EXPECT_THAT(said, Not(HasSubstr("withdrawn")));
}

}  // namespace
}  // namespace gpumem
