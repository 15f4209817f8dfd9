// The raw journal (format version 2): a record is in the file the moment Record()
// returns. A child that records on several threads (some short-lived, so regions pass
// from thread to thread) is SIGKILLed at many random points, with no flush and no
// destructor; the file must read back with exactly the records whose Record() returned,
// none twice. Plus damaged journals and a journal read while its writer still runs.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "profiler/journal_format.h"
#include "profiler/trace_writer.h"
#include "tests/profiler/trace_test_util.h"
#include "tools/trace/gpumem_reader.h"

namespace gpumem {
namespace {

using testing::ChunkSpan;
using testing::ReadBytes;
using testing::TempPath;
using testing::WalkChunks;

bool AnyWarningHas(const trace::Trace& t, const std::string& text) {
  for (const std::string& w : t.warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

RawRecord Alloc(std::uint64_t addr) {
  RawRecord r;
  r.type = format::RecordType::kAlloc;
  r.time_ns = TraceWriter::NowNs();
  r.addr = addr;
  r.size = 512;
  r.thread = TraceWriter::ThreadId();
  return r;
}

// Lanes of the child: each records addr = lane << 32 | i for i = 0, 1, ... and stores
// i + 1 in its shared counter after each Record() returns.
constexpr int kLanes = 4;
constexpr std::uint64_t kLaneShift = 32;

[[noreturn]] void RunChild(const std::string& path, int flush_ms, std::size_t ring,
                           std::atomic<std::uint64_t>* counters) {
  TraceWriterOptions options;
  options.path = path;
  options.flush_interval_ms = flush_ms;
  options.ring_records = ring;
  options.records_per_chunk = 300;  // several chunks per drain: marks must be per chunk
  auto writer = TraceWriter::Open(options);
  if (!writer.ok()) _exit(3);
  TraceWriter* w = writer->get();
  auto lane = [&](int l, std::uint64_t from, std::uint64_t count) {
    for (std::uint64_t i = from; i < from + count; ++i) {
      w->Record(Alloc((std::uint64_t(l) << kLaneShift) | i));
      counters[l].store(i + 1, std::memory_order_release);
    }
  };
  std::vector<std::thread> threads;
  for (int l = 0; l < kLanes - 1; ++l) {
    threads.emplace_back([&, l] { lane(l, 0, UINT64_MAX / 4); });
  }
  // The last lane: a chain of short-lived threads, 700 records each, so a region is
  // handed to a new thread once its old one exits and is drained.
  for (std::uint64_t from = 0;; from += 700) {
    std::thread t([&, from] { lane(kLanes - 1, from, 700); });
    t.join();
  }
}

struct KillResult {
  std::uint64_t counted[kLanes];
};

// Forks a recorder, kills it once it has counted `target` records in all, returns the
// counters read after its death.
KillResult RecordAndKill(const std::string& path, int flush_ms, std::size_t ring,
                         std::uint64_t target, std::uint32_t extra_us) {
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(shared, MAP_FAILED);
  auto* counters = new (shared) std::atomic<std::uint64_t>[kLanes]();
  const pid_t child = fork();
  if (child == 0) RunChild(path, flush_ms, ring, counters);
  EXPECT_GT(child, 0);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    std::uint64_t total = 0;
    for (int l = 0; l < kLanes; ++l) total += counters[l].load(std::memory_order_acquire);
    if (total >= target) break;
    usleep(50);
  }
  usleep(extra_us);
  EXPECT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  KillResult result;
  for (int l = 0; l < kLanes; ++l) result.counted[l] = counters[l].load();
  munmap(shared, 4096);
  return result;
}

TEST(JournalKillTest, EveryReturnedRecordReadsBackAtEveryKillPoint) {
  const std::string path = TempPath("journal_kill.gpumem");
  std::mt19937_64 rng(20261123);
  const int flush_ms[] = {1, 7, 3600000};  // compressing all the time ... never
  const std::size_t rings[] = {64, 2048};
  std::uint64_t from_journal = 0, from_chunks = 0;
  for (int round = 0; round < 36; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int flush = flush_ms[round % 3];
    const std::size_t ring = rings[(round / 3) % 2];
    // A never-compressing writer must not fill its rings (it would wait forever).
    const std::uint64_t max_target = flush > 1000 ? ring / 2 : 200000;
    const std::uint64_t target = rng() % max_target;
    KillResult killed = RecordAndKill(path, flush, ring, target,
                                      static_cast<std::uint32_t>(rng() % 2000));
    trace::GpumemFileInfo info;
    auto t = trace::ParseGpumemTrace(ReadBytes(path), path, &info);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE(info.complete);
    EXPECT_EQ(info.journal_damaged, 0u);
    std::vector<std::vector<std::uint64_t>> seen(kLanes);
    for (const trace::Event& e : t->events) {
      const auto l = static_cast<std::size_t>(e.addr >> kLaneShift);
      ASSERT_LT(l, seen.size());
      seen[l].push_back(e.addr & ((std::uint64_t{1} << kLaneShift) - 1));
    }
    for (int l = 0; l < kLanes; ++l) {
      std::vector<std::uint64_t>& s = seen[l];
      std::sort(s.begin(), s.end());
      // Exactly 0 .. n-1, once each, where n is the lane's count or one more (the record
      // in flight at the kill may be committed before its count was stored).
      for (std::size_t i = 0; i < s.size(); ++i) {
        ASSERT_EQ(s[i], i) << "lane " << l << ": a record lost or read twice";
      }
      EXPECT_GE(s.size(), killed.counted[l]) << "lane " << l << ": returned records lost";
      EXPECT_LE(s.size(), killed.counted[l] + 1) << "lane " << l;
    }
    EXPECT_TRUE(AnyWarningHas(*t, "from the raw journal"));
    from_journal += info.journal_events;
    from_chunks += t->events.size() - info.journal_events;
  }
  // Both ways back were exercised.
  EXPECT_GT(from_journal, 0u);
  EXPECT_GT(from_chunks, 0u);
  std::printf("recovered %llu events from chunks and %llu from journals over 36 kills\n",
              static_cast<unsigned long long>(from_chunks),
              static_cast<unsigned long long>(from_journal));
  std::remove(path.c_str());
}

// The file of a live writer that has compressed nothing yet reads like a killed one's:
// the page cache already holds every record.
class LiveJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("journal_live.gpumem");
    TraceWriterOptions options;
    options.path = path_;
    options.flush_interval_ms = 3600000;
    auto writer = TraceWriter::Open(options);
    ASSERT_TRUE(writer.ok());
    writer_ = std::move(*writer);
  }
  void TearDown() override {
    EXPECT_TRUE(writer_->Close().ok());
    std::remove(path_.c_str());
  }
  void RecordOn(int threads_in_turn, std::uint64_t per_thread, std::uint64_t* next) {
    for (int k = 0; k < threads_in_turn; ++k) {
      std::thread t([&] {
        for (std::uint64_t i = 0; i < per_thread; ++i) writer_->Record(Alloc((*next)++));
      });
      t.join();
    }
  }
  std::string path_;
  std::unique_ptr<TraceWriter> writer_;
};

TEST_F(LiveJournalTest, UncompressedRecordsReadBackFromTheJournal) {
  for (std::uint64_t i = 0; i < 300; ++i) writer_->Record(Alloc(i));
  trace::GpumemFileInfo info;
  auto t = trace::ParseGpumemTrace(ReadBytes(path_), path_, &info);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 300u);
  EXPECT_EQ(info.journal_events, 300u);
  for (std::size_t i = 0; i < 300; ++i) EXPECT_EQ(t->events[i].addr, i);
  EXPECT_EQ(writer_->recorded(), 300u);
}

TEST_F(LiveJournalTest, RegionsPassToNewThreadsWithoutDuplicates) {
  std::uint64_t next = 0;
  RecordOn(3, 400, &next);  // three threads one after another
  writer_->Flush();         // compressed; their regions are free again
  RecordOn(2, 150, &next);  // reuse a region, not compressed yet
  const std::string bytes = ReadBytes(path_);
  std::size_t journals = 0;
  for (const ChunkSpan& s : WalkChunks(bytes)) {
    journals += s.kind == format::ChunkKind::kJournal ? 1 : 0;
  }
  // Three regions for the first three threads (an exited thread's region is free again
  // only once drained); the later threads reuse them.
  EXPECT_EQ(journals, 3u);
  trace::GpumemFileInfo info;
  auto t = trace::ParseGpumemTrace(bytes, path_, &info);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(info.journal_events, 300u);
  ASSERT_EQ(t->events.size(), 1500u);
  for (std::size_t i = 0; i < t->events.size(); ++i) ASSERT_EQ(t->events[i].addr, i);
}

std::size_t JournalRecordsAt(const std::string& bytes, std::size_t* header_at) {
  for (const ChunkSpan& s : WalkChunks(bytes)) {
    if (s.kind != format::ChunkKind::kJournal) continue;
    *header_at = s.offset;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + s.offset;
    return s.offset + format::kChunkHeaderSize + format::kJournalHeaderBytes +
           format::GetU32(p + format::kChunkHeaderSize + 12);
  }
  return 0;
}

TEST_F(LiveJournalTest, DamagedJournalRecordIsLeftOutAndNamed) {
  for (std::uint64_t i = 0; i < 300; ++i) writer_->Record(Alloc(i));
  std::string bytes = ReadBytes(path_);
  std::size_t header_at = 0;
  const std::size_t records_at = JournalRecordsAt(bytes, &header_at);
  ASSERT_GT(records_at, 0u);
  // Every byte of record 150 in turn: never a crash, never a wrong event.
  for (std::size_t b = 0; b < format::kJournalRecordBytes; ++b) {
    std::string damaged = bytes;
    damaged[records_at + 150 * format::kJournalRecordBytes + b] ^= 0x5a;
    trace::GpumemFileInfo info;
    auto t = trace::ParseGpumemTrace(damaged, path_, &info);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->events.size(), 299u) << "byte " << b;
    for (const trace::Event& e : t->events) ASSERT_NE(e.addr, 150u);
    EXPECT_TRUE(AnyWarningHas(*t, "lacks record 150")) << "byte " << b;
  }
  // A damaged region header: the region is skipped and named with its offset. Its
  // records were the only events, so nothing is readable: an error, not an empty trace.
  std::string damaged = bytes;
  damaged[header_at + format::kChunkHeaderSize + 8] ^= 1;  // capacity
  auto t = trace::ParseGpumemTrace(damaged, path_);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsDataLoss(t.status())) << t.status();
  EXPECT_NE(t.status().message().find("no event is readable"), std::string::npos);
  EXPECT_NE(t.status().message().find("corrupt chunk at offset " + std::to_string(header_at)),
            std::string::npos)
      << t.status();
}

TEST_F(LiveJournalTest, RandomGarbageInTheJournalNeverCrashes) {
  for (std::uint64_t i = 0; i < 500; ++i) writer_->Record(Alloc(i));
  const std::string bytes = ReadBytes(path_);
  std::size_t header_at = 0;
  const std::size_t records_at = JournalRecordsAt(bytes, &header_at);
  std::mt19937_64 rng(7);
  // A damaged record passes the 16-bit check with odds 1 in 65536, and what the journal
  // holds (its clock values, what the writer had drained) differs from run to run: over
  // the ~1,500 live records damaged here, ~0.02 pass a run. More than 4 (odds ~1e-8)
  // means the check lets garbage through.
  int garbage_read = 0;
  for (int round = 0; round < 300; ++round) {
    std::string damaged = bytes;
    for (int k = 0; k < 20; ++k) {
      damaged[records_at + rng() % (2048 * format::kJournalRecordBytes)] =
          static_cast<char>(rng());
    }
    auto t = trace::ParseGpumemTrace(damaged, path_);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_LE(t->events.size(), 500u);
    for (const trace::Event& e : t->events) garbage_read += e.addr >= 500u;
  }
  EXPECT_LE(garbage_read, 4);
}

TEST(JournalCloseTest, AFinishedRunReadsOnlyItsChunks) {
  const std::string path = TempPath("journal_closed.gpumem");
  TraceWriterOptions options;
  options.path = path;
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok());
  for (std::uint64_t i = 0; i < 5000; ++i) (*writer)->Record(Alloc(i));
  ASSERT_TRUE((*writer)->Close().ok());
  trace::GpumemFileInfo info;
  auto t = trace::ParseGpumemTrace(ReadBytes(path), path, &info);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(info.complete);
  EXPECT_EQ(info.journal_events, 0u);
  EXPECT_EQ(t->events.size(), 5000u);
  EXPECT_TRUE(t->warnings.empty());
  std::remove(path.c_str());
}

// Version 1 (before the journal) is version 2 without journal chunks: still read, e.g.
// the H100 trace kept in tests/data.
TEST(JournalCloseTest, AVersion1FileStillReads) {
  const std::string path = std::string(GPUMEM_TEST_DATA) + "/leaky_mlp_pair.gpumem";
  const std::string bytes = ReadBytes(path);
  ASSERT_GT(bytes.size(), format::kPrefixSize);
  ASSERT_EQ(format::GetU32(reinterpret_cast<const unsigned char*>(bytes.data()) + 8), 1u);
  trace::GpumemFileInfo info;
  auto t = trace::ParseGpumemTrace(bytes, path, &info);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(info.complete);
  EXPECT_GT(t->events.size(), 1000u);
  EXPECT_TRUE(t->warnings.empty());
}

}  // namespace
}  // namespace gpumem
