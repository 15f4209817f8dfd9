// The recorder as the allocator sees it: observer events in, a trace with stacks out.
#include "profiler/recorder.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <tuple>

#include "tests/profiler/trace_test_util.h"
#include "tools/trace/gpumem_reader.h"

namespace gpumem {
namespace {

using testing::ReadBytes;
using testing::TempPath;

// Named, exported (the test links with ENABLE_EXPORTS) and not inlined, so a native stack
// taken inside the recorder must show it.
extern "C" __attribute__((noinline)) void GpumemTestAllocationSite(Recorder* recorder,
                                                                   std::uint64_t addr) {
  recorder->OnEvent({AllocatorEventKind::kAlloc, 1, addr, 4096, 7});
  asm volatile("" ::: "memory");  // keeps the call from becoming a tail call
}

// As the CUPTI tracer records a driver call: an API frame innermost.
extern "C" __attribute__((noinline)) void GpumemTestDriverCallSite(Recorder* recorder,
                                                                   std::uint32_t api_frame,
                                                                   bool with_native) {
  recorder->RecordEvent(format::RecordType::kSegmentAlloc, 0, 0x1000, 4096, 0, api_frame,
                        std::nullopt, 0, with_native);
  asm volatile("" ::: "memory");
}

bool StackHas(const trace::Trace& t, std::uint32_t stack, const std::string& function) {
  for (std::uint32_t f : t.stacks.at(stack)) {
    if (t.frames[f].function.find(function) != std::string::npos) return true;
  }
  return false;
}

TEST(RecorderTest, ParsesStackModes) {
  EXPECT_EQ(*ParseStackMode("none"), StackMode::kNone);
  EXPECT_EQ(*ParseStackMode("python"), StackMode::kPython);
  EXPECT_EQ(*ParseStackMode("native"), StackMode::kNative);
  EXPECT_EQ(*ParseStackMode("all"), StackMode::kAll);
  auto bad = ParseStackMode("some");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("GPUMEM_STACKS='some'"), std::string::npos);
}

TEST(RecorderTest, OptionsComeFromTheEnvironment) {
  setenv("GPUMEM_TRACE", "runs/run-%r.gpumem", 1);
  setenv("GPUMEM_STACKS", "native", 1);
  setenv("GPUMEM_TRACE_FLUSH_MS", "7", 1);
  auto options = RecorderOptions::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->path, "runs/run-%r.gpumem");
  EXPECT_EQ(options->stacks, StackMode::kNative);
  EXPECT_EQ(options->writer.flush_interval_ms, 7);
  EXPECT_EQ(options->writer.sync_interval_ms, 1000);
  setenv("GPUMEM_TRACE_SYNC_MS", "0", 1);  // never sync
  options = RecorderOptions::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->writer.sync_interval_ms, 0);
  setenv("GPUMEM_TRACE_SYNC_MS", "-5", 1);
  EXPECT_FALSE(RecorderOptions::FromEnvironment().ok());
  unsetenv("GPUMEM_TRACE_SYNC_MS");
  setenv("GPUMEM_TRACE_FLUSH_MS", "soon", 1);
  EXPECT_FALSE(RecorderOptions::FromEnvironment().ok());
  unsetenv("GPUMEM_TRACE");
  unsetenv("GPUMEM_STACKS");
  unsetenv("GPUMEM_TRACE_FLUSH_MS");
}

TEST(RecorderTest, RecordsObserverEventsStepsAndNativeStacks) {
  RecorderOptions options;
  options.path = TempPath("recorder-%p-%r.gpumem");
  options.stacks = StackMode::kNative;
  auto recorder = Recorder::Open(options);
  ASSERT_TRUE(recorder.ok()) << recorder.status();
  const std::string path = (*recorder)->writer().path();
  EXPECT_EQ(path.find('%'), std::string::npos) << path;
  EXPECT_NE(path.find(std::to_string(getpid())), std::string::npos) << path;
  for (int i = 0; i < 3; ++i) GpumemTestAllocationSite(recorder->get(), 0x1000 * (i + 1));
  EXPECT_EQ((*recorder)->Step(), 1u);
  (*recorder)->OnEvent({AllocatorEventKind::kFree, 1, 0x1000, 4096, 7});
  (*recorder)->OnEvent({AllocatorEventKind::kMap, 1, 0x200000, 2 << 20, 0});
  (*recorder)->OnEvent({AllocatorEventKind::kUnmap, 1, 0x200000, 2 << 20, 0});
  (*recorder)->OnEvent({AllocatorEventKind::kOom, 1, 0, 1ull << 40, 7});
  EXPECT_EQ((*recorder)->Step(), 2u);
  ASSERT_TRUE((*recorder)->Close().ok());

  trace::GpumemFileInfo info;
  auto t = trace::ParseGpumemTrace(ReadBytes(path), path, &info);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(info.header["stacks"], "native");
  ASSERT_EQ(t->events.size(), 9u);
  using A = trace::Action;
  const A expected[] = {A::kAlloc, A::kAlloc, A::kAlloc, A::kStep, A::kFreeRequested,
                        A::kSegmentMap, A::kSegmentUnmap, A::kOom, A::kStep};
  for (std::size_t i = 0; i < 9; ++i) EXPECT_EQ(t->events[i].action, expected[i]) << i;
  EXPECT_EQ(t->events[0].device, 1);
  EXPECT_EQ(t->events[0].stream, 7u);
  EXPECT_EQ(t->events[2].addr, 0x3000u);
  EXPECT_EQ(t->events[3].size, 1u);  // step number
  EXPECT_EQ(t->events[8].size, 2u);
  EXPECT_EQ(t->events[7].size, 1ull << 40);
  // The three allocations come from one site: one interned stack, which names the site
  // and does not show the recorder's own frames.
  EXPECT_NE(t->events[0].stack_id, 0u);
  EXPECT_EQ(t->events[0].stack_id, t->events[1].stack_id);
  EXPECT_EQ(t->events[0].stack_id, t->events[2].stack_id);
  EXPECT_TRUE(StackHas(*t, t->events[0].stack_id, "GpumemTestAllocationSite"));
  EXPECT_FALSE(StackHas(*t, t->events[0].stack_id, "Recorder::"));
  const trace::Frame& innermost = t->frames[t->stacks[t->events[0].stack_id][0]];
  EXPECT_NE(innermost.function.find("GpumemTestAllocationSite"), std::string::npos)
      << "innermost frame is " << innermost.function;
  EXPECT_EQ(t->events[4].stack_id, 0u) << "frees carry no stack";
  std::remove(path.c_str());
}

TEST(RecorderTest, NoStacksModeRecordsNoStacks) {
  RecorderOptions options;
  options.path = TempPath("nostacks.gpumem");
  options.stacks = StackMode::kNone;
  auto recorder = Recorder::Open(options);
  ASSERT_TRUE(recorder.ok());
  GpumemTestAllocationSite(recorder->get(), 0x10);
  ASSERT_TRUE((*recorder)->Close().ok());
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->events.size(), 1u);
  EXPECT_EQ(t->events[0].stack_id, 0u);
  std::remove(options.path.c_str());
}

TEST(RecorderTest, PythonModeWithoutPythonRecordsEmptyStacks) {
  // This test program has no interpreter: python stacks are skipped, not a failure.
  RecorderOptions options;
  options.path = TempPath("nopython.gpumem");
  options.stacks = StackMode::kPython;
  auto recorder = Recorder::Open(options);
  ASSERT_TRUE(recorder.ok());
  GpumemTestAllocationSite(recorder->get(), 0x10);
  ASSERT_TRUE((*recorder)->Close().ok());
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->events.size(), 1u);
  EXPECT_EQ(t->events[0].stack_id, 0u);
  std::remove(options.path.c_str());
}

// Python stacks (the default) get native frames for the events asked to name their
// library; no stacks stay none.
TEST(RecorderTest, NativeFramesWhereAskedUnlessStacksAreNone) {
  for (const StackMode mode : {StackMode::kPython, StackMode::kNone}) {
    RecorderOptions options;
    options.path = TempPath("withnative.gpumem");
    options.stacks = mode;
    auto recorder = Recorder::Open(options);
    ASSERT_TRUE(recorder.ok());
    const std::uint32_t api = (*recorder)->writer().stacks().InternNamedFrame(
        format::FrameKind::kApi, "cudaMalloc", "[cuda-runtime]", 0);
    GpumemTestDriverCallSite(recorder->get(), api, /*with_native=*/true);
    GpumemTestDriverCallSite(recorder->get(), api, /*with_native=*/false);
    ASSERT_TRUE((*recorder)->Close().ok());
    auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
    ASSERT_TRUE(t.ok());
    ASSERT_EQ(t->events.size(), 2u);
    const bool python = mode == StackMode::kPython;
    EXPECT_EQ(StackHas(*t, t->events[0].stack_id, "GpumemTestDriverCallSite"), python);
    EXPECT_FALSE(StackHas(*t, t->events[0].stack_id, "Recorder::"));
    EXPECT_EQ(t->stacks.at(t->events[1].stack_id).size(), 1u) << "the API frame alone";
    std::remove(options.path.c_str());
  }
}

// A loop nothing marks (k-means in tensor operations), reported the profile-only way,
// under PyTorch's allocator lock: no warning is written from within those calls. The
// passes' warnings wait for a call before the lock, or, where none comes, the close.
TEST(RecorderTest, PassWarningsAreWrittenOutsideTheAllocationsAndAtTheLatestAtClose) {
  RecorderOptions options;
  options.path = TempPath("passes.gpumem");
  options.stacks = StackMode::kNone;
  options.leak_warn_steps = 8;
  auto recorder = Recorder::Open(options);
  ASSERT_TRUE(recorder.ok()) << recorder.status();
  enum : std::uint32_t { kDistances = 1, kKept, kSums };
  constexpr std::uint64_t kMiB = 1 << 20;
  std::uint64_t addr = 0;
  ::testing::internal::CaptureStderr();
  for (int pass = 0; pass < 40; ++pass) {
    const std::uint64_t distances = addr += 256 * kMiB, sums = addr += 256 * kMiB;
    for (const auto& [at, size, stack] :
         {std::tuple{distances, 200 * kMiB, kDistances}, {addr += 256 * kMiB, 800'000, kKept},
          {sums, std::uint64_t{64} << 10, kSums}}) {
      (*recorder)->RecordWithStack(format::RecordType::kAlloc, 0, at, size, 0, stack);
    }
    (*recorder)->RecordWithStack(format::RecordType::kFree, 0, distances, 0, 0, 0);
    (*recorder)->RecordWithStack(format::RecordType::kFree, 0, sums, 0, 0, 0);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE((*recorder)->Close().ok());
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("gpumem: leak warning at pass"),
            std::string::npos);
  std::remove(options.path.c_str());
}

TEST(RecorderTest, MeasuresItsOwnCostOnlyWhenAsked) {
  for (const bool measure : {false, true}) {
    RecorderOptions options;
    options.path = TempPath(measure ? "cost.gpumem" : "nocost.gpumem");
    options.stacks = StackMode::kPython;  // no interpreter here: captures find no frame
    options.measure_cost = measure;
    auto recorder = Recorder::Open(options);
    ASSERT_TRUE(recorder.ok());
    for (int i = 0; i < 3; ++i) {
      Recorder::CallScope scope(recorder->get());
      GpumemTestAllocationSite(recorder->get(), 0x1000 * (i + 1));
    }
    (*recorder)->OnEvent({AllocatorEventKind::kFree, 1, 0x1000, 4096, 7});
    const std::string summary = (*recorder)->CostSummary();
    if (measure) {
      EXPECT_NE(summary.find(": 3 stack captures"), std::string::npos) << summary;
      EXPECT_NE(summary.find("0 took the GIL back, 3 found no Python frame"), std::string::npos)
          << summary;
      EXPECT_NE(summary.find("; 4 records"), std::string::npos) << summary;
    } else {
      EXPECT_NE(summary.find(": 0 stack captures"), std::string::npos) << summary;
      EXPECT_NE(summary.find("; 0 records"), std::string::npos) << summary;
    }
    ASSERT_TRUE((*recorder)->Close().ok());
    std::remove(options.path.c_str());
  }
}

}  // namespace
}  // namespace gpumem
