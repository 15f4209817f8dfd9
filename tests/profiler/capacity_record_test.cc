// The capacity record (type 14) and the step record's source read back, from the chunks
// of a closed trace and from the journal of a killed one.
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

void RecordCapsAndSteps(Recorder* r) {
  r->RecordCapacity(0, 80ull << 30, format::CapacitySource::kDeviceTotal);
  Recorder::SetStepSource(format::StepSource::kOptimizerHook);
  r->OnEvent({AllocatorEventKind::kAlloc, 0, 0x1000, 4096, 0});
  r->Step();
  r->RecordCapacity(0, 40ull << 30, format::CapacitySource::kMemoryFraction);
  Recorder::SetStepSource(format::StepSource::kExplicit);
  r->Step();
  Recorder::SetStepSource(format::StepSource::kBackward);
  r->Step();
  Recorder::SetStepSource(format::StepSource::kModelCall);
  r->Step();
  Recorder::SetStepSource(format::StepSource::kGraphReplay);
  r->Step();
  Recorder::SetStepSource(format::StepSource::kUnknown);
}

void ExpectCapsAndSteps(const trace::Trace& t) {
  ASSERT_EQ(t.capacity_changes.size(), 2u);
  EXPECT_EQ(t.capacity_changes[0].bytes, 80ull << 30);
  EXPECT_EQ(t.capacity_changes[0].source, trace::CapacitySource::kDeviceTotal);
  EXPECT_EQ(t.capacity_changes[1].bytes, 40ull << 30);
  EXPECT_EQ(t.capacity_changes[1].source, trace::CapacitySource::kMemoryFraction);
  EXPECT_LE(t.capacity_changes[0].time_us, t.capacity_changes[1].time_us);
  ASSERT_EQ(t.events.size(), 6u);  // capacity changes are not events
  EXPECT_EQ(t.events[0].action, trace::Action::kAlloc);
  EXPECT_EQ(t.events[0].step_source, trace::StepSource::kUnknown);
  EXPECT_EQ(t.events[1].step_source, trace::StepSource::kOptimizerHook);
  EXPECT_EQ(t.events[2].step_source, trace::StepSource::kExplicit);
  EXPECT_EQ(t.events[3].step_source, trace::StepSource::kBackward);
  EXPECT_EQ(t.events[4].step_source, trace::StepSource::kModelCall);
  EXPECT_EQ(t.events[5].step_source, trace::StepSource::kGraphReplay);
}

RecorderOptions Options(const char* name) {
  RecorderOptions options;
  options.path = TempPath(name);
  options.stacks = StackMode::kNone;
  return options;
}

TEST(CapacityRecordTest, ClosedTraceReadsBack) {
  RecorderOptions options = Options("caps.gpumem");
  auto recorder = Recorder::Open(options);
  ASSERT_TRUE(recorder.ok());
  RecordCapsAndSteps(recorder->get());
  ASSERT_TRUE((*recorder)->Close().ok());
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->warnings.empty()) << t->warnings.front();  // the end chunk's count holds
  ExpectCapsAndSteps(*t);
  std::remove(options.path.c_str());
}

TEST(CapacityRecordTest, KilledTraceReadsBackFromTheJournal) {
  RecorderOptions options = Options("caps-killed.gpumem");
  ASSERT_TRUE(testing::RecordInKilledChild(options, &RecordCapsAndSteps));
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectCapsAndSteps(*t);
  std::remove(options.path.c_str());
}

}  // namespace
}  // namespace gpumem
