// The fragmentation targets of issue 3, on the real traces in tests/data: the "gpumem"
// policy holds at most 2 % more than the trace's peak of live bytes, and fits in a device
// of exactly 1.02 x that peak. And issue 4's: the smallest device that completes the
// trace is gpumem's of all the policies, and once a steady training loop is warm, no step
// unmaps a page or synchronizes the device (each costs step time on a GPU).
#include <cstdint>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "tools/replay/min_cap.h"
#include "tools/replay/replayer.h"
#include "tools/report/steps.h"
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

// Issue 4's smallest cap at which training completes, in simulation: gpumem's must be the
// lowest of the policies (PyTorch native and with expandable segments).
TEST_P(GpumemReplayTest, NeedsTheSmallestDeviceOfAnyPolicy) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(TracePath(GetParam()));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<replay::MinCapResult> ours = replay::FindMinCap(*t, "gpumem", {});
  ASSERT_TRUE(ours.ok()) << ours.status();
  for (const char* peer : {"pytorch", "pytorch-expandable"}) {
    absl::StatusOr<replay::MinCapResult> theirs = replay::FindMinCap(*t, peer, {});
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    std::printf("%s: smallest cap gpumem %llu (%.4f x peak), %s %llu (%.4f x peak)\n",
                GetParam().c_str(), static_cast<unsigned long long>(ours->min_cap),
                ours->ratio(), peer, static_cast<unsigned long long>(theirs->min_cap),
                theirs->ratio());
    EXPECT_LE(ours->min_cap, theirs->min_cap) << peer;
  }
}

// Issue 4 on hardware: on an H100, PyTorch with expandable segments completes resnet50 at
// a 3064 MiB cap and fails at 3062 (five runs each, ninth session; 3056 fails too), so it
// needs 1532 pages of 2 MiB. The simulated expandable emulation is more pessimistic
// (1.0153 x peak), so the bound comes from the measurement: gpumem's smallest device must
// need at least a page less. The simulation and the H100 agree on gpumem's resnet50 (1532
// pages before the growth rule below, 1528 after, on both). What brings it there:
// LargePool::TakeIdlePages taking from the free blocks that strand the fewest bytes, and
// LargePool::PlanGrowth growing a free block rather than a fresh range at equal pages.
constexpr std::uint64_t kResnet50ExpandableMeasuredBytes = std::uint64_t{3064} << 20;

TEST(GpumemMinCapTest, Resnet50BelowMeasuredExpandableSegments) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(TracePath("resnet50"));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<replay::MinCapResult> ours = replay::FindMinCap(*t, "gpumem", {});
  ASSERT_TRUE(ours.ok()) << ours.status();
  std::printf("resnet50: smallest cap gpumem %.1f MiB (measured expandable %llu MiB)\n",
              static_cast<double>(ours->min_cap) / (1 << 20),
              static_cast<unsigned long long>(kResnet50ExpandableMeasuredBytes >> 20));
  // A cap below 3064 MiB holds at most 1531 pages.
  EXPECT_LT(ours->min_cap, kResnet50ExpandableMeasuredBytes);
}

// Steady traces (the same work every step; leaky_mlp only adds 6 MiB per step): in the
// second half of the steps, where every run has passed its peak, no page is unmapped and
// the device is never synchronized, with and without a cap of 1.02 x peak allocated.
class GpumemSteadyStateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpumemSteadyStateTest, NoUnmapOrSynchronizeOnceWarm) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(TracePath(GetParam()));
  ASSERT_TRUE(t.ok()) << t.status();
  const report::Steps steps = report::FindSteps(*t, std::nullopt);
  ASSERT_GE(steps.ends.size(), 8u) << "steps of " << GetParam() << " not found";

  replay::ReplayOptions options;
  options.step_ends = steps.ends;
  for (bool capped : {false, true}) {
    if (capped) {
      options.capacity = static_cast<std::uint64_t>(replay::PeakAllocated(*t) * kTargetRatio);
    }
    absl::StatusOr<replay::ReplayResult> r = replay::Replay(*t, "gpumem", options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->oom.has_value());
    EXPECT_LE(r->ratio, kTargetRatio);
    ASSERT_EQ(r->steps.size(), steps.ends.size() + 1);
    std::printf("%s%s: %zu steps; whole replay: %llu maps, %llu unmaps, %llu synchronizes; "
                "steps %zu-%zu: %llu maps, %llu unmaps, %llu synchronizes\n",
                GetParam().c_str(), capped ? " (cap 1.02x)" : "", r->steps.size(),
                static_cast<unsigned long long>(r->total.maps),
                static_cast<unsigned long long>(r->total.unmaps),
                static_cast<unsigned long long>(r->total.synchronizes), r->warmup_steps + 1,
                r->steps.size(), static_cast<unsigned long long>(r->steady.maps),
                static_cast<unsigned long long>(r->steady.unmaps),
                static_cast<unsigned long long>(r->steady.synchronizes));
    for (std::size_t k = r->warmup_steps; k < r->steps.size(); ++k) {
      EXPECT_EQ(r->steps[k].unmaps, 0u) << "step " << k + 1;
      EXPECT_EQ(r->steps[k].synchronizes, 0u) << "step " << k + 1;
      EXPECT_EQ(r->steps[k].stitches, 0u) << "step " << k + 1;
    }
  }
}

// A gpumem trace of tests/data and replay options that count device calls per step of its
// own: nullopt (a test failure) if it does not load or has other than `steps` step marks.
struct SteppedTrace {
  trace::Trace trace;
  replay::ReplayOptions options;
};
std::optional<SteppedTrace> LoadStepped(const std::string& file, std::size_t steps) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/" + file);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return std::nullopt;
  SteppedTrace s{*std::move(t), {}};
  s.options.step_ends = report::FindSteps(s.trace, std::nullopt).ends;
  EXPECT_EQ(s.options.step_ends.size(), steps) << file;
  if (s.options.step_ends.size() != steps) return std::nullopt;
  return s;
}

// Prints what FSDP2's rank 0 replay did in its steady steps, and checks it stays within
// the target, without synchronizing, mapping at most 1,500 pages in 20 stitches.
void ExpectFewSteadyMaps(const char* what, const replay::ReplayResult& r) {
  std::printf("%s: ratio %.4f; steps %zu-%zu: %llu maps, %llu unmaps, %llu stitches\n", what,
              r.ratio, r.warmup_steps + 1, r.steps.size(),
              static_cast<unsigned long long>(r.steady.maps),
              static_cast<unsigned long long>(r.steady.unmaps),
              static_cast<unsigned long long>(r.steady.stitches));
  EXPECT_LE(r.ratio, kTargetRatio);
  EXPECT_LE(r.steady.maps, 1500u);
  EXPECT_LE(r.steady.stitches, 20u);
  EXPECT_EQ(r.steady.synchronizes, 0u);
}

// FSDP2's three streams (compute, all-gather, reduce-scatter; tests/data/README.md): the
// communication streams' buffers come from the compute stream's free blocks where they
// are, so memory moves between the streams' heaps without remapping pages. Without
// borrowing the steps after the warm-up map 1,863 pages (14 stitches) at 1.016; with it,
// 792 (3) at 1.009.
TEST(GpumemFsdp2Test, CommunicationStreamsBorrowInsteadOfRemapping) {
  std::optional<SteppedTrace> s = LoadStepped("fsdp2_rank0.gpumem", 40);
  ASSERT_TRUE(s.has_value());
  replay::ReplayOptions& options = s->options;
  absl::StatusOr<replay::ReplayResult> r = replay::Replay(s->trace, "gpumem", options);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectFewSteadyMaps("fsdp2 rank 0", *r);
  // A borrow waits for its block's users alone, and for nothing once the lender's
  // checkpoint is seen complete: 365 stream waits in the steady steps, where waiting for
  // all the lender had queued made 882.
  std::printf("fsdp2 rank 0: %llu stream waits in steps %zu-%zu\n",
              static_cast<unsigned long long>(r->steady.stream_waits), r->warmup_steps + 1,
              r->steps.size());
  EXPECT_LE(r->steady.stream_waits, 500u);

  // The device a step behind the host (2,430 trace events a step), as on a GPU: the
  // borrowers' work on a freed block has not run when the compute stream needs memory
  // again. The block is back in the compute stream's heap at its free all the same,
  // fenced: the layout stays what it is with the device in step, at the price of a stream
  // wait. (Held back until the borrowers' work ran, it mapped 4,430 pages at 1.017; held
  // and not taken back early, 1.11.)
  options.device_lag = s->trace.events.size() / options.step_ends.size();
  r = replay::Replay(s->trace, "gpumem", options);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectFewSteadyMaps("fsdp2 rank 0, the device a step behind", *r);
}

// A larger model (hidden 2048, 12 blocks; tests/data/README.md), rank 1, the device a step
// behind: three ~1 GB logits-sized blocks a step, of a size that changes with the batch,
// are stitched from pages idle elsewhere (~200 a step on two H200s, as here). 4 MiB
// pages move half as many for the same bytes, within the same 1.02.
TEST(GpumemFsdp2Test, LargerPagesHalveWhatStitchingMaps) {
  std::optional<SteppedTrace> s = LoadStepped("fsdp2_2048_rank1.gpumem", 60);
  ASSERT_TRUE(s.has_value());
  replay::ReplayOptions& options = s->options;
  options.device_lag = s->trace.events.size() / options.step_ends.size();
  std::uint64_t maps[2] = {};
  for (int i = 0; i < 2; ++i) {
    options.page_bytes = std::size_t{2} << (20 + i);
    absl::StatusOr<replay::ReplayResult> r = replay::Replay(s->trace, "gpumem", options);
    ASSERT_TRUE(r.ok()) << r.status();
    std::printf("fsdp2 hidden 2048 rank 1, %zu MiB pages: ratio %.4f; steps %zu-%zu: %llu "
                "maps, %llu stitches\n", options.page_bytes >> 20, r->ratio,
                r->warmup_steps + 1, r->steps.size(),
                static_cast<unsigned long long>(r->steady.maps),
                static_cast<unsigned long long>(r->steady.stitches));
    EXPECT_LE(r->ratio, kTargetRatio);
    EXPECT_EQ(r->steady.synchronizes, 0u);
    maps[i] = r->steady.maps;
  }
  EXPECT_LE(maps[1] * 10, maps[0] * 6);
}

INSTANTIATE_TEST_SUITE_P(RealTraces, GpumemSteadyStateTest,
                         ::testing::Values(GPUMEM_STEADY_TRACES),
                         [](const auto& p) { return p.param; });

INSTANTIATE_TEST_SUITE_P(RealTraces, GpumemReplayTest,
                         ::testing::Values(GPUMEM_REPLAY_TRACES),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace gpumem
