// Many threads recording, interning stacks and flushing at once; built also with
// ThreadSanitizer. (The reader is not built for TSan, so the file is checked through the
// documented chunk headers and the end chunk's event count; trace_writer_test reads the
// same kind of file back event by event.)
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "profiler/recorder.h"
#include "profiler/trace_writer.h"
#include "tests/profiler/trace_test_util.h"

namespace gpumem {
namespace {

TEST(TraceWriterRaceTest, ConcurrentRecordInternAndFlush) {
  TraceWriterOptions options;
  options.path = testing::TempPath("race.gpumem");
  options.ring_records = 32;
  options.flush_interval_ms = 1;
  options.records_per_chunk = 300;
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok());
  constexpr int kThreads = 6;
  constexpr int kPerThread = 3000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      StackTable& stacks = (*writer)->stacks();
      for (int i = 0; i < kPerThread; ++i) {
        RawFrame frames[2] = {{std::uint64_t(0x1000 + i % 17), 0, RawFrame::kNativeTag},
                              {std::uint64_t(0x2000 + t % 2), 0, RawFrame::kNativeTag}};
        RawRecord r;
        r.time_ns = TraceWriter::NowNs();
        r.addr = i;
        r.thread = TraceWriter::ThreadId();
        r.stack_id = stacks.Intern(frames, 2);
        (*writer)->Record(r);
        if (i % 500 == 0) (*writer)->Flush();
        if (i == 1500 && t == 0) (*writer)->Annotate(0, "halfway", true);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*writer)->stacks().stack_count(), 17u * 2);
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ((*writer)->recorded(), std::uint64_t{kThreads} * kPerThread);

  const std::string bytes = testing::ReadBytes(options.path);
  const auto spans = testing::WalkChunks(bytes);
  ASSERT_GE(spans.size(), 3u);
  ASSERT_EQ(spans.back().kind, format::ChunkKind::kEnd);
  EXPECT_EQ(spans.back().offset + spans.back().size, bytes.size());
  const auto* end = reinterpret_cast<const unsigned char*>(bytes.data()) + spans.back().offset;
  auto header = format::ParseChunkHeader(end);
  ASSERT_TRUE(header && format::ChunkChecksumOk(end, *header));
  auto payload = format::DecodePayload(end + format::kChunkHeaderSize, *header);
  ASSERT_TRUE(payload.has_value());
  std::uint64_t events = 0;
  ASSERT_TRUE(format::ByteReader(*payload).GetVarint(&events));
  EXPECT_EQ(events, std::uint64_t{kThreads} * kPerThread);
  std::remove(options.path.c_str());
}

// Journal regions change hands: waves of short-lived threads record while the writer
// drains every millisecond and another thread reads recorded(); a region freed by an
// exited thread goes to a new one only after its records are compressed.
TEST(TraceWriterRaceTest, ShortLivedThreadsReuseJournalRegions) {
  TraceWriterOptions options;
  options.path = testing::TempPath("race-reuse.gpumem");
  options.ring_records = 16;
  options.flush_interval_ms = 1;
  options.records_per_chunk = 50;
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok());
  std::atomic<bool> done{false};
  std::thread poller([&] {
    std::uint64_t last = 0;
    while (!done.load()) {
      const std::uint64_t n = (*writer)->recorded();
      EXPECT_GE(n, last);
      last = n;
      std::this_thread::yield();
    }
  });
  constexpr int kWaves = 40, kThreads = 3, kPerThread = 100;
  for (int wave = 0; wave < kWaves; ++wave) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kPerThread; ++i) {
          RawRecord r;
          r.time_ns = TraceWriter::NowNs();
          r.addr = i;
          (*writer)->Record(r);
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  done.store(true);
  poller.join();
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ((*writer)->recorded(), std::uint64_t{kWaves} * kThreads * kPerThread);
  const std::string bytes = testing::ReadBytes(options.path);
  const auto spans = testing::WalkChunks(bytes);
  std::size_t journals = 0;
  for (const auto& s : spans) journals += s.kind == format::ChunkKind::kJournal ? 1 : 0;
  EXPECT_LT(journals, std::size_t{kWaves} * kThreads) << "regions were not reused";
  ASSERT_EQ(spans.back().kind, format::ChunkKind::kEnd);
  const auto* end = reinterpret_cast<const unsigned char*>(bytes.data()) + spans.back().offset;
  auto header = format::ParseChunkHeader(end);
  ASSERT_TRUE(header && format::ChunkChecksumOk(end, *header));
  auto payload = format::DecodePayload(end + format::kChunkHeaderSize, *header);
  ASSERT_TRUE(payload.has_value());
  std::uint64_t events = 0;
  ASSERT_TRUE(format::ByteReader(*payload).GetVarint(&events));
  EXPECT_EQ(events, std::uint64_t{kWaves} * kThreads * kPerThread);
  std::remove(options.path.c_str());
}

TEST(TraceWriterRaceTest, RecorderFromManyThreadsWithNativeStacks) {
  RecorderOptions options;
  options.path = testing::TempPath("recorder-race.gpumem");
  options.stacks = StackMode::kNative;
  options.writer.flush_interval_ms = 1;
  auto recorder = Recorder::Open(options);
  ASSERT_TRUE(recorder.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        (*recorder)->OnEvent({i % 2 == 0 ? AllocatorEventKind::kAlloc : AllocatorEventKind::kFree,
                              t, std::uintptr_t(0x1000 * i), 4096, 0});
        if (i == 250) (*recorder)->Step();
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE((*recorder)->Close().ok());
  EXPECT_EQ((*recorder)->writer().recorded(), 4u * 500 + 4);
  EXPECT_GE((*recorder)->writer().stacks().stack_count(), 1u);
  std::remove((*recorder)->writer().path().c_str());
}

}  // namespace
}  // namespace gpumem
