// Writer -> file -> reader round trips, single- and multi-threaded (also run under TSan).
#include "profiler/trace_writer.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <thread>
#include <vector>

#include "profiler/trace_path.h"
#include "tests/profiler/trace_test_util.h"
#include "tools/trace/gpumem_reader.h"
#include "tools/trace/load.h"

namespace gpumem {
namespace {

using testing::ReadBytes;
using testing::TempPath;

RawRecord MakeRecord(format::RecordType type, std::uint64_t addr, std::uint64_t size,
                     std::uint32_t stack) {
  RawRecord r;
  r.type = type;
  r.time_ns = TraceWriter::NowNs();
  r.addr = addr;
  r.size = size;
  r.stream = 0x7f00 + (addr % 3);
  r.device = static_cast<std::int32_t>(addr % 2);
  r.thread = TraceWriter::ThreadId();
  r.stack_id = stack;
  return r;
}

TEST(TraceWriterTest, RoundTripsEventsStacksAndHeader) {
  TraceWriterOptions options;
  options.path = TempPath("roundtrip.gpumem");
  options.header["stacks"] = "test";
  options.header["device_capacity"] = "81920";
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  StackTable& stacks = (*writer)->stacks();
  // Seven distinct sites, each a two-frame stack of named frames.
  std::vector<std::uint32_t> site(7);
  for (int s = 0; s < 7; ++s) {
    RawFrame frames[2] = {
        {stacks.InternNamedFrame(format::FrameKind::kPython, "alloc_" + std::to_string(s),
                                 "model.py", 10 + s),
         0, RawFrame::kNamedTag},
        {stacks.InternNamedFrame(format::FrameKind::kPython, "train", "train.py", 99), 0,
         RawFrame::kNamedTag}};
    site[s] = stacks.Intern(frames, 2);
  }
  EXPECT_EQ(site[3], stacks.Intern(
                         std::vector<RawFrame>{
                             {stacks.InternNamedFrame(format::FrameKind::kPython, "alloc_3",
                                                      "model.py", 13),
                              0, RawFrame::kNamedTag},
                             {stacks.InternNamedFrame(format::FrameKind::kPython, "train",
                                                      "train.py", 99),
                              0, RawFrame::kNamedTag}}
                             .data(),
                         2))
      << "the same frames must intern to the same stack";
  constexpr int kEvents = 5000;
  for (int i = 0; i < kEvents; ++i) {
    const auto type = i % 2 == 0 ? format::RecordType::kAlloc : format::RecordType::kFree;
    const std::uint64_t addr = 0x7f0000000000ull + 512ull * (i / 2);
    (*writer)->Record(MakeRecord(type, addr, 512 + i, i % 2 == 0 ? site[i % 7] : 0));
    if (i == 2500) (*writer)->Flush();  // more than one records chunk
  }
  RawRecord oom = MakeRecord(format::RecordType::kOom, 0, 1 << 30, 0);
  oom.has_extra = true;
  oom.extra = 12345;
  (*writer)->Record(oom);
  (*writer)->Annotate(0, "epoch 1", true);
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ((*writer)->recorded(), kEvents + 1u);

  trace::GpumemFileInfo info;
  std::string bytes = ReadBytes(options.path);
  auto trace = trace::ParseGpumemTrace(bytes, options.path, &info);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_TRUE(info.complete);
  EXPECT_TRUE(trace->warnings.empty()) << trace->warnings.front();
  EXPECT_EQ(info.bytes_used, bytes.size());
  EXPECT_EQ(info.header["stacks"], "test");
  EXPECT_EQ(info.header["pid"], std::to_string(getpid()));
  EXPECT_EQ(trace->format, "gpumem");
  EXPECT_EQ(trace->device_capacity, 81920u);
  ASSERT_EQ(trace->events.size(), kEvents + 1u);
  for (int i = 0; i < kEvents; ++i) {
    const trace::Event& e = trace->events[i];
    ASSERT_EQ(e.action, i % 2 == 0 ? trace::Action::kAlloc : trace::Action::kFreeRequested);
    ASSERT_EQ(e.addr, 0x7f0000000000ull + 512ull * (i / 2));
    ASSERT_EQ(e.size, 512u + i);
    ASSERT_EQ(e.stream, 0x7f00 + (e.addr % 3));
    ASSERT_EQ(e.device, static_cast<std::int32_t>(e.addr % 2));
    ASSERT_EQ(e.thread, TraceWriter::ThreadId());
    if (i % 2 == 0) {
      const auto& frames = trace->stacks.at(e.stack_id);
      ASSERT_EQ(frames.size(), 2u);
      EXPECT_EQ(trace->frames[frames[0]].function, "alloc_" + std::to_string(i % 7));
      EXPECT_EQ(trace->frames[frames[0]].line, 10 + i % 7);
      EXPECT_EQ(trace->frames[frames[1]].filename, "train.py");
    } else {
      ASSERT_EQ(e.stack_id, 0u);
    }
    if (i > 0) {
      ASSERT_GE(e.time_us, trace->events[i - 1].time_us);
    }
  }
  EXPECT_EQ(trace->events.back().action, trace::Action::kOom);
  EXPECT_EQ(trace->events.back().device_free, 12345u);
  ASSERT_EQ(trace->annotations.size(), 1u);
  EXPECT_EQ(trace->annotations[0].name, "epoch 1");

  // LoadTrace picks the gpumem reader by the magic.
  auto loaded = trace::LoadTrace(options.path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->events.size(), kEvents + 1u);
  std::remove(options.path.c_str());
}

TEST(TraceWriterTest, DeltaEncodingKeepsEventsSmall) {
  TraceWriterOptions options;
  options.path = TempPath("small.gpumem");
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok());
  constexpr int kEvents = 100000;
  for (int i = 0; i < kEvents; ++i) {
    (*writer)->Record(MakeRecord(format::RecordType::kAlloc, 0x7f0000000000ull + 4096ull * i,
                                 4096, 1 + i % 5));
  }
  ASSERT_TRUE((*writer)->Close().ok());
  const std::size_t bytes = ReadBytes(options.path).size();
  // 56 bytes per record in memory; varints, deltas and zstd must bring that far down.
  EXPECT_LT(bytes, kEvents * 6u) << bytes << " bytes for " << kEvents << " events";
  std::remove(options.path.c_str());
}

// The ring finds a record's slot with a mask: a size that is not a power of two is
// rounded down to one, and every record still comes back, in order, over many laps.
TEST(TraceWriterTest, RingSizeNotAPowerOfTwoLosesNothing) {
  TraceWriterOptions options;
  options.path = TempPath("ring100.gpumem");
  options.ring_records = 100;
  options.flush_interval_ms = 1;
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok());
  constexpr int kEvents = 5000;
  for (int i = 0; i < kEvents; ++i) {
    (*writer)->Record(MakeRecord(format::RecordType::kAlloc, 0x1000ull * (i + 1), 64, 0));
    if (i % 40 == 39) (*writer)->Flush();
  }
  ASSERT_TRUE((*writer)->Close().ok());
  auto trace = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_TRUE(trace->warnings.empty());
  ASSERT_EQ(trace->events.size(), std::size_t{kEvents});
  for (int i = 0; i < kEvents; ++i) {
    ASSERT_EQ(trace->events[i].addr, 0x1000ull * (i + 1)) << "event " << i;
  }
  std::remove(options.path.c_str());
}

TEST(TraceWriterTest, ManyThreadsRecordConcurrently) {
  TraceWriterOptions options;
  options.path = TempPath("threads.gpumem");
  options.ring_records = 64;  // small rings: writers wait on the drain thread
  options.flush_interval_ms = 1;
  options.records_per_chunk = 500;
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok());
  constexpr int kThreads = 8;
  constexpr int kPerThread = 4000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      StackTable& stacks = (*writer)->stacks();
      for (int i = 0; i < kPerThread; ++i) {
        // Threads share sites, so stack interning races too.
        RawFrame frame{stacks.InternNamedFrame(format::FrameKind::kNative,
                                               "site" + std::to_string(i % 13), "lib.so", 0),
                       0, RawFrame::kNamedTag};
        RawRecord r = MakeRecord(format::RecordType::kAlloc,
                                 (std::uint64_t{1} + t) << 32 | std::uint64_t(i), i,
                                 stacks.Intern(&frame, 1));
        (*writer)->Record(r);
        if (i % 1000 == 999) (*writer)->Flush();
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE((*writer)->Close().ok());
  auto trace = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_TRUE(trace->warnings.empty());
  ASSERT_EQ(trace->events.size(), std::size_t{kThreads} * kPerThread);
  std::map<std::uint64_t, std::int64_t> next_index;  // thread -> next i expected
  for (const trace::Event& e : trace->events) {
    const std::uint64_t t = e.addr >> 32;
    const std::int64_t i = static_cast<std::int64_t>(e.addr & 0xffffffff);
    ASSERT_EQ(i, next_index[t]) << "thread " << t << " lost or reordered an event";
    next_index[t] = i + 1;
    const auto& frames = trace->stacks.at(e.stack_id);
    ASSERT_EQ(frames.size(), 1u);
    ASSERT_EQ(trace->frames[frames[0]].function, "site" + std::to_string(i % 13));
  }
  EXPECT_EQ(next_index.size(), std::size_t{kThreads});
  std::remove(options.path.c_str());
}

TEST(TraceWriterTest, ThreadsThatExitAreDrained) {
  TraceWriterOptions options;
  options.path = TempPath("exited.gpumem");
  options.flush_interval_ms = 1000;  // only Flush/Close drain
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok());
  for (int t = 0; t < 20; ++t) {
    std::thread([&] {
      for (int i = 0; i < 10; ++i) {
        (*writer)->Record(MakeRecord(format::RecordType::kAlloc, i, 1, 0));
      }
    }).join();
  }
  (*writer)->Flush();
  EXPECT_EQ((*writer)->recorded(), 200u);
  ASSERT_TRUE((*writer)->Close().ok());
  auto trace = trace::ParseGpumemTrace(ReadBytes(options.path), options.path);
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->events.size(), 200u);
  std::remove(options.path.c_str());
}

// torchrun's launcher and rank 0 both expand run-%r.gpumem to run-0.gpumem: the second
// to open must neither truncate the first's mapped file (its next record would be a
// SIGBUS) nor lose its own records.
TEST(TraceWriterTest, ASecondWriterOfOnePathWritesBesideIt) {
  TraceWriterOptions options;
  options.path = TempPath("shared-name.gpumem");
  auto first = TraceWriter::Open(options);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int i = 0; i < 100; ++i) {
    (*first)->Record(MakeRecord(format::RecordType::kAlloc, 0x1000 + 512 * i, 512, 0));
  }
  (*first)->Flush();
  auto second = TraceWriter::Open(options);
  ASSERT_TRUE(second.ok()) << second.status();
  const std::string beside = PathWithPid(options.path, getpid());
  EXPECT_EQ((*second)->path(), beside);
  for (int i = 0; i < 100; ++i) {
    (*first)->Record(MakeRecord(format::RecordType::kFree, 0x1000 + 512 * i, 512, 0));
    (*second)->Record(MakeRecord(format::RecordType::kAlloc, 0x9000 + 512 * i, 512, 0));
  }
  ASSERT_TRUE((*first)->Close().ok());
  ASSERT_TRUE((*second)->Close().ok());
  for (const auto& [path, events] : {std::pair{options.path, 200u}, std::pair{beside, 100u}}) {
    auto trace = trace::LoadTrace(path);
    ASSERT_TRUE(trace.ok()) << trace.status();
    EXPECT_TRUE(trace->warnings.empty()) << path << ": " << trace->warnings.front();
    EXPECT_EQ(trace->events.size(), events) << path;
  }
  // Closed, a trace is finished and its name free again: the next writer takes it.
  auto third = TraceWriter::Open(options);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)->path(), options.path);
  ASSERT_TRUE((*third)->Close().ok());
  std::remove(options.path.c_str());
  std::remove(beside.c_str());
}

TEST(TraceWriterTest, UnwritablePathIsAnError) {
  TraceWriterOptions options;
  options.path = "/nonexistent-dir/x.gpumem";
  auto writer = TraceWriter::Open(options);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("/nonexistent-dir/x.gpumem"), std::string::npos);
}

}  // namespace
}  // namespace gpumem
