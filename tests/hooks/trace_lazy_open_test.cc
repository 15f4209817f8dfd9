// The trace opens when the process first uses a device, not when gpumem starts: a process
// that records nothing (torchrun's launcher, a CPU-only DataLoader worker) leaves no file,
// and the steps and caps said before the file opens are in it once it does.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"
#include "hooks/gpumem_trace.h"
#include "hooks/trace_hook.h"
#include "tools/trace/load.h"

namespace gpumem::hooks {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string TraceCheck() {
  std::string s(gpumem_trace_check(nullptr, 0), '\0');
  gpumem_trace_check(s.data(), s.size());
  s.resize(s.size() - 1);
  return s;
}

TEST(TraceLazyOpenTest, AnUnwritableFolderIsSaidWithoutAFile) {
  setenv("GPUMEM_TRACE", "/nonexistent-gpumem-folder/run-%r.gpumem", 1);
  EXPECT_NE(TraceCheck().find("/nonexistent-gpumem-folder/"), std::string::npos)
      << TraceCheck();
  unsetenv("GPUMEM_TRACE");
}

TEST(TraceLazyOpenTest, NothingRecordedNoFileThenEarlyRecordsComeFirst) {
  const std::string dir = ::testing::TempDir();
  const std::string pattern = dir + "lazy-%l-%p.gpumem";
  setenv("LOCAL_RANK", "3", 1);
  const std::string path = dir + "lazy-3-" + std::to_string(getpid()) + ".gpumem";
  setenv("GPUMEM_MODE", "profile", 1);
  setenv("GPUMEM_TRACE", pattern.c_str(), 1);
  setenv("GPUMEM_STACKS", "none", 1);
  ResetRegistryForTesting();
  EXPECT_EQ(TraceCheck(), "");
  gpumem_trace_capacity(0, 40ull << 30, 3);
  gpumem_step();
  gpumem_step();
  EXPECT_FALSE(Exists(path)) << "no device event yet: no file";
  EXPECT_EQ(gpumem_trace_events(), 0u);

  ASSERT_EQ(gpumem_profile_start(), 0);  // what CUDA's start does in profile-only mode
  ASSERT_TRUE(Exists(path));
  gpumem_record_event(GPUMEM_EVENT_ALLOC, 0, 0x1000, 512, 0, 0, 0);
  gpumem_step();
  FlushTraceForTesting();

  absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 4u);
  EXPECT_EQ(t->events[0].action, trace::Action::kStep);
  EXPECT_EQ(t->events[1].action, trace::Action::kStep);
  EXPECT_EQ(t->events[2].action, trace::Action::kAlloc);
  EXPECT_EQ(t->events[3].action, trace::Action::kStep);
  ASSERT_EQ(t->capacity_changes.size(), 1u);
  EXPECT_EQ(t->capacity_changes[0].bytes, 40ull << 30);
  std::remove(path.c_str());
  for (const char* v : {"LOCAL_RANK", "GPUMEM_MODE", "GPUMEM_TRACE", "GPUMEM_STACKS"}) {
    unsetenv(v);
  }
}

}  // namespace
}  // namespace gpumem::hooks
