// The fragmentation targets of issue 3, on the real traces in tests/data: the "gpumem"
// policy holds at most 2 % more than the trace's peak of live bytes, and fits in a device
// of exactly 1.02 x that peak.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "tools/replay/replayer.h"
#include "tools/trace/load.h"

namespace gpumem {
namespace {

constexpr double kTargetRatio = 1.02;

std::string TracePath(const std::string& name) {
  return std::string(GPUMEM_TEST_DATA) + "/" + name + ".trace.tsv.gz";
}

class GpumemReplayTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpumemReplayTest, ReservesAtMostTwoPercentOverPeakAndFitsTheCap) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(TracePath(GetParam()));
  ASSERT_TRUE(t.ok()) << t.status();

  absl::StatusOr<replay::ReplayResult> free_run = replay::Replay(*t, "gpumem");
  ASSERT_TRUE(free_run.ok()) << free_run.status();
  EXPECT_FALSE(free_run->oom.has_value());
  ASSERT_GT(free_run->peak_allocated, 0u);
  std::printf("%s: peak allocated %llu, peak reserved %llu, ratio %.4f, %.3f s\n",
              GetParam().c_str(), static_cast<unsigned long long>(free_run->peak_allocated),
              static_cast<unsigned long long>(free_run->peak_reserved), free_run->ratio,
              free_run->seconds);
  EXPECT_LE(free_run->ratio, kTargetRatio);

  replay::ReplayOptions capped;
  capped.capacity = static_cast<std::uint64_t>(free_run->peak_allocated * kTargetRatio);
  absl::StatusOr<replay::ReplayResult> cap_run = replay::Replay(*t, "gpumem", capped);
  ASSERT_TRUE(cap_run.ok()) << cap_run.status();
  EXPECT_FALSE(cap_run->oom.has_value())
      << "OOM at event " << cap_run->oom->event_index << ": requested "
      << cap_run->oom->requested_bytes << ", allocated " << cap_run->oom->allocated_bytes
      << ", reserved " << cap_run->oom->reserved_bytes << ", largest free "
      << cap_run->oom->largest_free_bytes;
  EXPECT_LE(cap_run->peak_reserved, *capped.capacity);
}

INSTANTIATE_TEST_SUITE_P(RealTraces, GpumemReplayTest,
                         ::testing::Values(GPUMEM_REPLAY_TRACES),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace gpumem
