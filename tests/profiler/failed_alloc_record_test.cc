// The failed-allocation record (type 15) reads back from the chunks of a closed trace and
// from the journal of a killed one; an unknown call reads as "unknown"; a version 3 file
// (before the record) still reads and a newer one is refused in one line.
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

constexpr std::uint32_t kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation

void RecordFailures(Recorder* r) {
  r->OnEvent({AllocatorEventKind::kAlloc, 0, 0x1000, 4096, 0});
  r->RecordEvent(format::RecordType::kFailedAlloc, 1,
                 format::FailedCallWord(format::MemoryApi::kCuMemAlloc, kOutOfMemory), 32 << 20,
                 0, 0, std::uint64_t{16} << 20);
  r->RecordEvent(format::RecordType::kFailedAlloc, 0,
                 format::FailedCallWord(format::MemoryApi::kCudaMallocAsync, kOutOfMemory),
                 1 << 20, 7);
  // A call this reader does not know, from a newer writer.
  r->RecordEvent(format::RecordType::kFailedAlloc, 0, (std::uint64_t{200} << 32) | 999, 4096, 0);
}

void ExpectFailures(const trace::Trace& t) {
  ASSERT_EQ(t.events.size(), 1u);  // failures are not events
  ASSERT_EQ(t.failed_allocations.size(), 3u);
  const trace::FailedAllocation& a = t.failed_allocations[0];
  EXPECT_EQ(a.call, "cuMemAlloc");
  EXPECT_EQ(a.device, 1);
  EXPECT_EQ(a.size, 32u << 20);
  EXPECT_EQ(a.error, kOutOfMemory);
  EXPECT_FALSE(a.runtime);
  EXPECT_EQ(trace::FailedCallErrorName(a), "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_TRUE(a.device_free.has_value());
  EXPECT_EQ(*a.device_free, 16u << 20);
  const trace::FailedAllocation& b = t.failed_allocations[1];
  EXPECT_EQ(b.call, "cudaMallocAsync");
  EXPECT_TRUE(b.runtime);
  EXPECT_EQ(trace::FailedCallErrorName(b), "cudaErrorMemoryAllocation");
  EXPECT_FALSE(b.device_free.has_value());
  const trace::FailedAllocation& c = t.failed_allocations[2];
  EXPECT_EQ(c.call, "unknown");
  EXPECT_FALSE(c.runtime);
  EXPECT_EQ(trace::FailedCallErrorName(c), "CUDA_ERROR_UNKNOWN");
  EXPECT_LE(a.time_us, b.time_us);
}

RecorderOptions Options(const char* name) {
  RecorderOptions options;
  options.path = TempPath(name);
  options.stacks = StackMode::kNone;
  return options;
}

std::string ClosedTrace(const char* name) {
  RecorderOptions options = Options(name);
  auto recorder = Recorder::Open(options);
  EXPECT_TRUE(recorder.ok());
  if (!recorder.ok()) return "";
  RecordFailures(recorder->get());
  EXPECT_TRUE((*recorder)->Close().ok());
  std::string bytes = ReadBytes(options.path);
  std::remove(options.path.c_str());
  return bytes;
}

void SetVersion(std::string* bytes, std::uint32_t version) {
  std::string v;
  format::PutU32(&v, version);
  bytes->replace(8, 4, v);
}

TEST(FailedAllocRecordTest, ClosedTraceReadsBack) {
  const std::string bytes = ClosedTrace("failed.gpumem");
  auto t = trace::ParseGpumemTrace(bytes, "failed.gpumem");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->warnings.empty()) << t->warnings.front();  // the end chunk's count holds
  ExpectFailures(*t);
}

TEST(FailedAllocRecordTest, KilledTraceReadsBackFromTheJournal) {
  RecorderOptions options = Options("failed-killed.gpumem");
  ASSERT_TRUE(testing::RecordInKilledChild(options, &RecordFailures));
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectFailures(*t);
  std::remove(options.path.c_str());
}

// The prefix's version is outside every checksum: a version 3 file is this one relabelled.
TEST(FailedAllocRecordTest, Version3StillReadsAndANewerVersionIsRefused) {
  std::string bytes = ClosedTrace("failed-v3.gpumem");
  ASSERT_EQ(format::kVersion, 4u);
  SetVersion(&bytes, 3);
  auto old = trace::ParseGpumemTrace(bytes, "v3.gpumem");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->events.size(), 1u);
  // 5 is a ring trace's segment (docs/trace-format.md, Ring traces): 6 is unknown.
  SetVersion(&bytes, 6);
  auto newer = trace::ParseGpumemTrace(bytes, "v6.gpumem");
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("version 6 is not supported"), std::string::npos)
      << newer.status();
}

TEST(MemoryApiTest, NamesAndDecodedNames) {
  EXPECT_EQ(format::MemoryApiOf("cuMemAlloc_v2"), format::MemoryApi::kCuMemAlloc);
  EXPECT_EQ(format::MemoryApiOf("cuMemAllocPitch_v2"), format::MemoryApi::kCuMemAllocPitch);
  EXPECT_EQ(format::MemoryApiOf("cudaMallocAsync_ptsz"), format::MemoryApi::kCudaMallocAsync);
  EXPECT_EQ(format::MemoryApiOf("cudaMalloc"), format::MemoryApi::kCudaMalloc);
  EXPECT_EQ(format::MemoryApiOf("cuMemFree_v2"), format::MemoryApi::kUnknown);
  EXPECT_STREQ(format::MemoryApiName(format::kMaxMemoryApi + 1), "unknown");
  EXPECT_STREQ(format::MemoryApiName(~std::uint64_t{0}), "unknown");
}

}  // namespace
}  // namespace gpumem
