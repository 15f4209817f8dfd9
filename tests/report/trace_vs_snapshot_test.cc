// Issue 6's proof: a gpumem trace of real training with a leak (tests/gpu/capture.py
// leaky_mlp on an H100, GPUMEM_TRACE + GPUMEM_STACKS=python, tests/gpu/trace_vs_snapshot.sh)
// gives the same verdict as PyTorch's own snapshot of the same workload on its native
// allocator (_record_memory_history(stacks="python")).
#include <algorithm>
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "tools/report/report.h"
#include "tools/trace/backward_caller.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {

// Independent of both recorders: what one leaky_mlp step keeps alive through `history`
// (loss.backward(retain_graph=True) keeps the graph): its input x (256x1024 fp32, line
// 106), the ReLU output the second Linear saved (256x4096 fp32) and that Linear's output
// that pow saved (256x1024 fp32), both under line 107, plus the 4-byte loss itself.
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kExpectedLeakPerStep = 6 * kMiB + 4;

Report Build(const std::string& name, trace::Trace* t) {
  absl::StatusOr<trace::Trace> loaded =
      trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/" + name);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (loaded.ok()) *t = std::move(*loaded);
  return BuildReport(*t, {});
}

TEST(TraceVsSnapshot, LeakyMlpSameVerdict) {
  trace::Trace gpumem_trace, snapshot;
  Report ours = Build("leaky_mlp_pair.gpumem", &gpumem_trace);
  Report theirs = Build("leaky_mlp_pair.pickle.xz", &snapshot);
  ASSERT_FALSE(ours.leaks.suspects.empty()) << ours.leaks.why_none;
  ASSERT_FALSE(theirs.leaks.suspects.empty()) << theirs.leaks.why_none;

  // Both have 60 steps: ours from gpumem.step() markers, PyTorch's from its annotations.
  EXPECT_EQ(ours.steps.count, 60u);
  EXPECT_EQ(theirs.steps.count, 60u);

  // The same top site, named from Python frames (the gpumem trace had none before the
  // recorder took the GIL back on PyTorch's GIL-released threads).
  EXPECT_EQ(ours.leaks.suspects.front().name, theirs.leaks.suspects.front().name);
  // Recorded on the GPU machine with absolute paths: shown relative to their folder,
  // while the stack keeps the full path.
  EXPECT_EQ(ours.leaks.suspects.front().name, "capture.py:107 leaky_mlp");
  EXPECT_EQ(ours.sites.common_dir().front(), '/');
  const std::vector<std::string> stack = StackNames(gpumem_trace, ours.leaks.suspects.front().stack);
  EXPECT_TRUE(std::any_of(stack.begin(), stack.end(), [&](const std::string& f) {
    return f == ours.sites.common_dir() + "capture.py:107 leaky_mlp";
  })) << "no full-path frame in the stack";

  // Bytes per step: within 2% of each other and of what the model keeps per step.
  EXPECT_NEAR(ours.leaks.bytes_per_step, theirs.leaks.bytes_per_step,
              0.02 * theirs.leaks.bytes_per_step);
  EXPECT_NEAR(ours.leaks.bytes_per_step, kExpectedLeakPerStep, 0.02 * kExpectedLeakPerStep);
  EXPECT_NEAR(theirs.leaks.bytes_per_step, kExpectedLeakPerStep, 0.02 * kExpectedLeakPerStep);
}

// Which allocations have Python frames: the same as in PyTorch's snapshot. Those made on
// the Python thread do; those of the autograd engine's thread (all of backward) have no
// Python frames of their own in either (the snapshot's reader gives them the stack of
// the call that started the pass, behind a "<backward pass>" frame). gpumem's trace has
// one more with frames: capture.py's torch.zeros(1) at line 118 runs before PyTorch's
// recording starts.
struct FrameCounts {
  std::size_t with = 0, without = 0;
};
FrameCounts CountAllocs(const trace::Trace& t) {
  FrameCounts c;
  for (const trace::Event& e : t.events) {
    if (e.action != trace::Action::kAlloc) continue;
    const std::vector<std::uint32_t>& stack = t.stacks[e.stack_id];
    if (!stack.empty() && t.frames[stack[0]].filename != trace::kBackwardPassFile) {
      ++c.with;
    } else {
      ++c.without;
    }
  }
  return c;
}

TEST(TraceVsSnapshot, SameAllocationsHavePythonFrames) {
  absl::StatusOr<trace::Trace> ours =
      trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp_pair.gpumem");
  absl::StatusOr<trace::Trace> theirs =
      trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp_pair.pickle.xz");
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  const FrameCounts a = CountAllocs(*ours), b = CountAllocs(*theirs);
  EXPECT_GT(b.with, 500u);
  EXPECT_EQ(a.with, b.with + 1);
  EXPECT_EQ(a.without, b.without);
}

}  // namespace
}  // namespace gpumem::report
