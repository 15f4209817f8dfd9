// The step record carries the driver's free and total bytes and the device they are of
// (address, stream, device), from the chunks of a closed trace and from the journal of a
// killed one; a step without them reads as unknown (0), as in older traces.
#include <gtest/gtest.h>

#include <cstdio>

#include "profiler/recorder.h"
#include "tests/profiler/killed_recorder.h"
#include "tests/profiler/trace_test_util.h"
#include "tools/trace/gpumem_reader.h"

namespace gpumem {
namespace {

using testing::ReadBytes;
using testing::TempPath;

constexpr std::uint64_t kGiB = 1ull << 30;

void RecordSteps(Recorder* r) {
  r->OnEvent({AllocatorEventKind::kAlloc, 3, 0x1000, 4096, 0});
  r->Step(DriverMemory{3, 70 * kGiB, 80 * kGiB});
  r->Step();
  r->Step(DriverMemory{3, 69 * kGiB, 80 * kGiB});
}

void ExpectSteps(const trace::Trace& t) {
  ASSERT_EQ(t.events.size(), 4u);
  const trace::Event& a = t.events[1];
  EXPECT_EQ(a.action, trace::Action::kStep);
  EXPECT_EQ(a.addr, 70 * kGiB);
  EXPECT_EQ(a.stream, 80 * kGiB);
  EXPECT_EQ(a.device, 3);
  EXPECT_EQ(t.events[2].addr, 0u);  // unknown
  EXPECT_EQ(t.events[2].stream, 0u);
  EXPECT_EQ(t.events[3].addr, 69 * kGiB);
  EXPECT_EQ(t.events[3].size, 3u);  // the step number stays in size
}

RecorderOptions Options(const char* name) {
  RecorderOptions options;
  options.path = TempPath(name);
  options.stacks = StackMode::kNone;
  return options;
}

TEST(StepDriverRecordTest, ClosedTraceReadsBack) {
  RecorderOptions options = Options("step-driver.gpumem");
  auto recorder = Recorder::Open(options);
  ASSERT_TRUE(recorder.ok());
  RecordSteps(recorder->get());
  ASSERT_TRUE((*recorder)->Close().ok());
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectSteps(*t);
  ASSERT_TRUE(t->run.clock_origin_ns.has_value());  // lines it up with a CUPTI trace
  std::remove(options.path.c_str());
}

TEST(StepDriverRecordTest, KilledTraceReadsBackFromTheJournal) {
  RecorderOptions options = Options("step-driver-killed.gpumem");
  ASSERT_TRUE(testing::RecordInKilledChild(options, &RecordSteps));
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectSteps(*t);
  std::remove(options.path.c_str());
}

// No driver in this process (CPU tests): nothing is sampled and CUDA is not started.
TEST(StepDriverRecordTest, NoDriverNoFigures) { EXPECT_EQ(SampleDriverMemory(), std::nullopt); }

}  // namespace
}  // namespace gpumem
