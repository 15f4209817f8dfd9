// GPUMEM_TRACE: the C ABI hands every event to the profiler's recorder, and the file it
// writes reads back (tools/trace) with the allocations the program made.
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"
#include "hooks/gpumem_trace.h"
#include "hooks/trace_hook.h"
#include "profiler/package_notes.h"
#include "tools/trace/load.h"

namespace gpumem::hooks {
namespace {

// The recorder is opened once per process: every test here writes to this one file, which
// is removed when the program ends.
const std::string& TracePath() {
  static const std::string* path = new std::string(
      ::testing::TempDir() + "c_api_trace_test_" + std::to_string(getpid()) + ".gpumem");
  return *path;
}
class RemoveTrace : public ::testing::Environment {
 public:
  void TearDown() override { std::remove(TracePath().c_str()); }
};
const auto* const kRemoveTrace = ::testing::AddGlobalTestEnvironment(new RemoveTrace);

// The simulated device, traced to TracePath() without stacks, from a fresh registry.
const std::string& TraceToTestFile() {
  setenv("GPUMEM_BACKEND", "sim", 1);
  setenv("GPUMEM_TRACE", TracePath().c_str(), 1);
  setenv("GPUMEM_STACKS", "none", 1);
  ResetRegistryForTesting();
  return TracePath();
}

TEST(CApiTraceTest, TraceHoldsEveryAllocationAndStep) {
  const std::string& path = TraceToTestFile();
  constexpr int kPairs = 1000;
  for (int i = 0; i < kPairs; ++i) {
    void* p = gpumem_alloc(4096 + i * 512, 0, nullptr);
    ASSERT_NE(p, nullptr);
    gpumem_free(p, 4096 + i * 512, 0, nullptr);
    if (i % 100 == 99) gpumem_step();
  }
  FlushTraceForTesting();
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  int allocs = 0, frees = 0, steps = 0;
  for (const trace::Event& e : t->events) {
    const bool ours = e.size >= 4096 && e.size < 4096 + kPairs * 512;  // other tests' differ
    allocs += ours && e.action == trace::Action::kAlloc;
    frees += ours && (e.action == trace::Action::kFreeRequested ||
                      e.action == trace::Action::kFreeCompleted);
    steps += e.action == trace::Action::kStep;
  }
  EXPECT_EQ(allocs, kPairs);
  EXPECT_GE(frees, kPairs);
  EXPECT_GE(steps, kPairs / 100);  // other tests in this process may have added steps
  ResetRegistryForTesting();
}

// Paused, allocations are left out (and gpumem_tracing says so, so no stack or autograd
// link is taken for them), and so are the frees of blocks allocated while paused: a paused
// trace records nothing per block. A block allocated while recording still has its free
// recorded when that comes during a pause; steps are recorded throughout.
TEST(CApiTraceTest, PausedRecordingLeavesOutWholeBlocks) {
  const std::string& path = TraceToTestFile();
  // Sizes no other test here uses: the file holds their events too.
  constexpr std::uint64_t kA = 3 << 20, kB = (3 << 20) + 512, kC = (3 << 20) + 1024;
  void* recorded = gpumem_alloc(kA, 0, nullptr);
  EXPECT_EQ(gpumem_tracing(), 1);
  gpumem_trace_pause(1);
  EXPECT_EQ(gpumem_tracing(), 0);
  void* unseen = gpumem_alloc(kB, 0, nullptr);
  gpumem_free(recorded, kA, 0, nullptr);  // allocated while recording: its free is recorded
  gpumem_step();
  gpumem_trace_pause(0);
  EXPECT_EQ(gpumem_tracing(), 1);
  gpumem_free(unseen, kB, 0, nullptr);  // allocated while paused: not, even recording again
  void* seen_again = gpumem_alloc(kC, 0, nullptr);
  gpumem_free(seen_again, kC, 0, nullptr);
  FlushTraceForTesting();
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::uint64_t> alloc_sizes, free_sizes;
  for (const trace::Event& e : t->events) {
    if (e.size != kA && e.size != kB && e.size != kC) continue;
    if (e.action == trace::Action::kAlloc) alloc_sizes.push_back(e.size);
    if (e.action == trace::Action::kFreeRequested) free_sizes.push_back(e.size);
  }
  EXPECT_EQ(alloc_sizes, (std::vector<std::uint64_t>{kA, kC}));
  EXPECT_EQ(free_sizes, (std::vector<std::uint64_t>{kA, kC}));
  ResetRegistryForTesting();
}

// Blocks of private pools are recorded like any other, whichever way they are freed.
TEST(CApiTraceTest, PoolBlocksAreRecordedLikeOthers) {
  const std::string& path = TraceToTestFile();
  constexpr std::uint64_t kSmall = 5000 + 3, kLarge = (5 << 20) + 7;  // sizes only used here
  void* small = gpumem_alloc_in_pool(kSmall, 0, nullptr, 11);
  void* large = gpumem_alloc_in_pool(kLarge, 0, nullptr, 11);
  gpumem_free(small, kSmall, -1, nullptr);
  gpumem_free(large, kLarge, 0, nullptr);
  FlushTraceForTesting();
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::uint64_t> alloc_sizes, free_sizes;
  for (const trace::Event& e : t->events) {
    if (e.size != kSmall && e.size != kLarge) continue;
    if (e.action == trace::Action::kAlloc) alloc_sizes.push_back(e.size);
    if (e.action == trace::Action::kFreeRequested) free_sizes.push_back(e.size);
  }
  EXPECT_EQ(alloc_sizes, (std::vector<std::uint64_t>{kSmall, kLarge}));
  EXPECT_EQ(free_sizes, (std::vector<std::uint64_t>{kSmall, kLarge}));
  ResetRegistryForTesting();
}

// A thread that runs the loop is noted in the trace once, however often it says so.
TEST(CApiTraceTest, ALoopThreadIsNotedOnceInTheTrace) {
  const std::string& path = TraceToTestFile();
  std::uint32_t loop_thread = 0;
  std::vector<int> said;
  std::thread loop([&] {
    loop_thread = static_cast<std::uint32_t>(::syscall(SYS_gettid));
    void* p = gpumem_alloc(4096, 0, nullptr);  // the trace opens with the first device
    said.push_back(gpumem_trace_loop_thread());
    said.push_back(gpumem_trace_loop_thread());
    gpumem_free(p, 4096, 0, nullptr);
  });
  loop.join();
  EXPECT_EQ(said, (std::vector<int>{1, 1}));
  FlushTraceForTesting();
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  int notes = 0;
  for (const trace::Annotation& a : t->annotations) {
    notes += format::ParseLoopThreadNote(a.name) == loop_thread;
  }
  EXPECT_EQ(notes, 1);
  ResetRegistryForTesting();
}

// The package's word that steps will be marked is noted in the trace once.
TEST(CApiTraceTest, StepsComingIsNotedOnceInTheTrace) {
  const std::string& path = TraceToTestFile();
  void* p = gpumem_alloc(4096, 0, nullptr);  // the trace opens with the first device
  gpumem_trace_steps_coming();
  gpumem_trace_steps_coming();
  gpumem_free(p, 4096, 0, nullptr);
  FlushTraceForTesting();
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  int notes = 0;
  for (const trace::Annotation& a : t->annotations) notes += a.name == format::kStepsComingNote;
  EXPECT_EQ(notes, 1);
  ResetRegistryForTesting();
}

}  // namespace
}  // namespace gpumem::hooks
