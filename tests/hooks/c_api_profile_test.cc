// Profile-only mode's C ABI (what libgpumem_torch.so calls from PyTorch's allocator trace
// tracker): events recorded with a stack taken earlier, steps, OOMs and autograd links
// land in the trace and read back; a bad GPUMEM_MODE is refused with the accepted values.
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

std::string LastError() {
  std::string s(gpumem_last_error(nullptr, 0), '\0');
  gpumem_last_error(s.data(), s.size());
  s.resize(s.size() - 1);
  return s;
}

TEST(CApiProfileTest, BadModeIsRefusedWithTheAcceptedValues) {
  setenv("GPUMEM_MODE", "sampling", 1);
  ResetRegistryForTesting();
  EXPECT_EQ(gpumem_profile_start(), -1);
  EXPECT_NE(LastError().find("GPUMEM_MODE='sampling': expected allocator or profile"),
            std::string::npos)
      << LastError();
  EXPECT_EQ(gpumem_tracing(), 0);
  unsetenv("GPUMEM_MODE");
  ResetRegistryForTesting();
}

TEST(CApiProfileTest, RecordedEventsReadBack) {
  const std::string path =
      ::testing::TempDir() + "c_api_profile_test_" + std::to_string(getpid()) + ".gpumem";
  setenv("GPUMEM_MODE", "profile", 1);
  setenv("GPUMEM_TRACE", path.c_str(), 1);
  setenv("GPUMEM_STACKS", "none", 1);
  ResetRegistryForTesting();
  // Nothing is recorded before the trace is open, and that is not an error.
  gpumem_record_event(GPUMEM_EVENT_ALLOC, 0, 0x10, 1, 0, 0, 0);
  ASSERT_EQ(gpumem_profile_start(), 0) << LastError();
  ASSERT_EQ(gpumem_profile_start(), 0) << "a second start reuses the open trace";
  EXPECT_EQ(gpumem_tracing(), 1);
  EXPECT_EQ(gpumem_capture_stack(), 0u) << "GPUMEM_STACKS=none";

  constexpr std::uint64_t kSegment = 0x7f0000000000, kStream = 0xabc;
  gpumem_record_event(GPUMEM_EVENT_SEGMENT_ALLOC, 1, kSegment, 2 << 20, kStream, 0, 0);
  gpumem_set_autograd_link(8, 1, 0);  // forward: taken by the next allocation only
  gpumem_record_event(GPUMEM_EVENT_ALLOC, 1, kSegment, 4096, kStream, 0, 0);
  gpumem_record_event(GPUMEM_EVENT_ALLOC, 1, kSegment + 4096, 512, kStream, 0, 0);
  gpumem_step();
  const std::uint32_t node = gpumem_autograd_node_frame("MmBackward0");
  EXPECT_NE(node, 0u);
  gpumem_set_autograd_link(7, 1, node);
  gpumem_record_event(GPUMEM_EVENT_ALLOC, 1, kSegment + 8192, 256, kStream, 0, 0);
  gpumem_record_event(GPUMEM_EVENT_FREE, 1, kSegment, 4096, kStream, 0, 0);
  gpumem_record_event(GPUMEM_EVENT_OOM, 1, 0, 1ull << 40, kStream, 0, 12345);
  gpumem_record_event(GPUMEM_EVENT_SEGMENT_FREE, 1, kSegment, 2 << 20, kStream, 0, 0);
  gpumem_record_event(99, 1, 0, 0, 0, 0, 0);  // unknown type: ignored
  gpumem_step();
  FlushTraceForTesting();

  absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  using trace::Action;
  const Action expected[] = {Action::kSegmentAlloc, Action::kAlloc, Action::kAlloc,
                             Action::kStep, Action::kAlloc, Action::kFreeRequested,
                             Action::kOom, Action::kSegmentFree, Action::kStep};
  ASSERT_EQ(t->events.size(), std::size(expected));
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    EXPECT_EQ(t->events[i].action, expected[i]) << i;
  }
  EXPECT_EQ(t->events[0].device, 1);
  EXPECT_EQ(t->events[0].stream, kStream);
  EXPECT_EQ(t->events[0].size, 2u << 20);
  EXPECT_EQ(t->events[1].addr, kSegment);
  EXPECT_EQ(t->events[3].size, 1u) << "step number";
  EXPECT_EQ(t->events[6].size, 1ull << 40);
  EXPECT_EQ(t->events[6].device_free, 12345u);
  // The backward allocation names its node (no forward stack to attach: stacks are off).
  const auto& backward = t->stacks.at(t->events[4].stack_id);
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_EQ(t->frames[backward[0]].function, "MmBackward0 (backward)");
  EXPECT_EQ(t->frames[backward[0]].filename, "<autograd>");
  EXPECT_EQ(t->events[1].stack_id, 0u);
  EXPECT_EQ(t->events[2].stack_id, 0u);
  unsetenv("GPUMEM_MODE");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gpumem::hooks
