// GPUMEM_TRACE: the C ABI hands every event to the profiler's recorder, and the file it
// writes reads back (tools/trace) with the allocations the program made.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"
#include "hooks/trace_hook.h"
#include "tools/trace/load.h"

namespace gpumem::hooks {
namespace {

TEST(CApiTraceTest, TraceHoldsEveryAllocationAndStep) {
  std::string path =
      ::testing::TempDir() + "c_api_trace_test_" + std::to_string(getpid()) + ".gpumem";
  setenv("GPUMEM_BACKEND", "sim", 1);
  setenv("GPUMEM_TRACE", path.c_str(), 1);
  setenv("GPUMEM_STACKS", "none", 1);
  ResetRegistryForTesting();
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
    allocs += e.action == trace::Action::kAlloc;
    frees += e.action == trace::Action::kFreeRequested || e.action == trace::Action::kFreeCompleted;
    steps += e.action == trace::Action::kStep;
  }
  EXPECT_EQ(allocs, kPairs);
  EXPECT_GE(frees, kPairs);
  EXPECT_EQ(steps, kPairs / 100);
  ResetRegistryForTesting();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gpumem::hooks
