// What a reader gets back from damaged files: cut at every chunk boundary and in the
// middle of chunks, bytes flipped, random mutations, and the file of a process killed
// with SIGKILL while it recorded.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <random>

#include "profiler/trace_writer.h"
#include "tests/profiler/trace_test_util.h"
#include "tools/trace/gpumem_reader.h"

namespace gpumem {
namespace {

using testing::ChunkSpan;
using testing::ReadBytes;
using testing::TempPath;
using testing::WalkChunks;
using testing::WalkDataChunks;
using testing::WipeJournals;

constexpr int kChunks = 10;
constexpr int kPerChunk = 100;

// A file whose records chunk k holds exactly the events with addr 100k .. 100k+99: the
// drain interval is long, so only the Flush() after every 100 events writes a chunk. Its
// journal region is wiped, so these tests are about chunks alone (the journal has its
// own tests in journal_recovery_test.cc).
std::string MakeChunkedFile() {
  TraceWriterOptions options;
  options.path = TempPath("chunked.gpumem");
  options.flush_interval_ms = 60000;
  auto writer = TraceWriter::Open(options);
  EXPECT_TRUE(writer.ok());
  StackTable& stacks = (*writer)->stacks();
  for (int c = 0; c < kChunks; ++c) {
    // A new stack per chunk: its definition travels in that chunk.
    RawFrame frame{stacks.InternNamedFrame(format::FrameKind::kPython,
                                           "chunk" + std::to_string(c), "f.py", c),
                   0, RawFrame::kNamedTag};
    const std::uint32_t stack = stacks.Intern(&frame, 1);
    for (int i = 0; i < kPerChunk; ++i) {
      RawRecord r;
      r.type = format::RecordType::kAlloc;
      r.time_ns = TraceWriter::NowNs();
      r.addr = std::uint64_t(c) * kPerChunk + i;
      r.size = 4096;
      r.stack_id = stack;
      (*writer)->Record(r);
    }
    (*writer)->Flush();
  }
  EXPECT_TRUE((*writer)->Close().ok());
  std::string bytes = ReadBytes(options.path);
  std::remove(options.path.c_str());
  WipeJournals(&bytes);
  return bytes;
}

// Events must be addr 0, 1, 2, ... with no hole; returns how many.
std::size_t PrefixLength(const trace::Trace& t) {
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    if (t.events[i].addr != i) return static_cast<std::size_t>(-1);
  }
  return t.events.size();
}

bool AnyWarningHas(const trace::Trace& t, const std::string& text) {
  for (const std::string& w : t.warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

class RecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    bytes_ = new std::string(MakeChunkedFile());
    spans_ = new std::vector<ChunkSpan>(WalkDataChunks(*bytes_));
  }
  static void TearDownTestSuite() {
    delete bytes_;
    delete spans_;
  }
  static std::string* bytes_;
  static std::vector<ChunkSpan>* spans_;
};
std::string* RecoveryTest::bytes_ = nullptr;
std::vector<ChunkSpan>* RecoveryTest::spans_ = nullptr;

TEST_F(RecoveryTest, FileHasTheExpectedChunks) {
  // header, kChunks records chunks, end; and one journal region (one thread recorded).
  ASSERT_EQ(spans_->size(), kChunks + 2u);
  EXPECT_EQ(WalkChunks(*bytes_).size(), kChunks + 3u);
  EXPECT_EQ(spans_->front().kind, format::ChunkKind::kHeader);
  EXPECT_EQ(spans_->back().kind, format::ChunkKind::kEnd);
  EXPECT_EQ(spans_->back().offset + spans_->back().size, bytes_->size());
}

TEST_F(RecoveryTest, CutAtEveryChunkBoundaryKeepsEveryCompleteChunk) {
  // Cutting before records chunk k (spans_[k + 1]) keeps exactly chunks 0..k-1.
  for (int k = 0; k <= kChunks; ++k) {
    const std::size_t cut = (*spans_)[k + 1].offset;
    auto t = trace::ParseGpumemTrace(absl::string_view(*bytes_).substr(0, cut), "cut.gpumem");
    if (k == 0) {  // no event before the cut: nothing readable is an error
      EXPECT_TRUE(absl::IsDataLoss(t.status())) << t.status();
      continue;
    }
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(PrefixLength(*t), std::size_t(k) * kPerChunk) << "cut at " << cut;
    EXPECT_TRUE(AnyWarningHas(*t, "did not finish")) << "cut at " << cut;
    EXPECT_TRUE(AnyWarningHas(*t, "recovered " + std::to_string(k * kPerChunk) + " events"));
    // Every recovered event keeps its stack.
    for (const trace::Event& e : t->events) {
      const auto& frames = t->stacks.at(e.stack_id);
      ASSERT_EQ(frames.size(), 1u);
      ASSERT_EQ(t->frames[frames[0]].function, "chunk" + std::to_string(e.addr / kPerChunk));
    }
  }
}

TEST_F(RecoveryTest, CutInsideAChunkKeepsTheChunksBeforeIt) {
  for (int k = 0; k < kChunks; ++k) {
    const ChunkSpan& span = (*spans_)[k + 1];
    for (std::size_t into : {std::size_t{1}, std::size_t{23}, span.size / 2, span.size - 1}) {
      const std::size_t cut = span.offset + into;
      auto t =
          trace::ParseGpumemTrace(absl::string_view(*bytes_).substr(0, cut), "cut.gpumem");
      const std::string where = "at offset " + std::to_string(span.offset);
      if (k == 0) {  // no event before the cut: nothing readable is an error
        EXPECT_TRUE(absl::IsDataLoss(t.status())) << t.status();
        EXPECT_NE(t.status().message().find(where), std::string::npos) << t.status();
        continue;
      }
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(PrefixLength(*t), std::size_t(k) * kPerChunk) << "cut at " << cut;
      EXPECT_TRUE(AnyWarningHas(*t, where))
          << "the warning must say where the data stops; cut at " << cut;
      ASSERT_TRUE(t->loss.has_value());
      EXPECT_EQ(t->loss->events_kept, std::size_t(k) * kPerChunk);
      EXPECT_EQ(t->loss->bytes_lost, into) << "the cut chunk's bytes; cut at " << cut;
    }
  }
}

TEST_F(RecoveryTest, PreallocatedZeroTailIsNotAnError) {
  // What a SIGKILLed writer leaves: the chunks, then fallocate'd zeros.
  std::string killed = bytes_->substr(0, (*spans_)[6].offset) + std::string(1 << 16, '\0');
  auto t = trace::ParseGpumemTrace(killed, "killed.gpumem");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(PrefixLength(*t), 5u * kPerChunk);
  EXPECT_TRUE(AnyWarningHas(*t, "preallocated space never written"));
}

TEST_F(RecoveryTest, CorruptChunkIsSkippedAndReportedWithItsOffset) {
  for (int k = 0; k < kChunks; ++k) {
    const ChunkSpan& span = (*spans_)[k + 1];
    std::string bad = *bytes_;
    bad[span.offset + span.size / 2] ^= 0x5a;
    auto t = trace::ParseGpumemTrace(bad, "bad.gpumem");
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->events.size(), std::size_t(kChunks - 1) * kPerChunk) << "chunk " << k;
    for (const trace::Event& e : t->events) {
      ASSERT_NE(e.addr / kPerChunk, std::uint64_t(k)) << "events of the bad chunk survived";
    }
    EXPECT_TRUE(AnyWarningHas(*t, "corrupt chunk at offset " + std::to_string(span.offset)));
    if (k < kChunks - 1) {
      // Stacks defined in the lost chunk are gone, the others intact.
      EXPECT_EQ(t->events.back().addr, std::uint64_t(kChunks * kPerChunk - 1));
    }
  }
}

TEST_F(RecoveryTest, BadMagicAndVersionAreOneLineErrors) {
  auto t = trace::ParseGpumemTrace("not a trace at all", "x.gpumem");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("x.gpumem"), std::string::npos);
  std::string future = *bytes_;
  future[8] = 99;
  t = trace::ParseGpumemTrace(future, "future.gpumem");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("version 99"), std::string::npos);
  t = trace::ParseGpumemTrace(bytes_->substr(0, format::kPrefixSize), "empty.gpumem");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().find('\n'), std::string::npos);
}

// Random damage of every kind must give a trace or an error, never a crash or a hang
// (ASan and UBSan run this too). Fixed seed: a failure reproduces.
TEST_F(RecoveryTest, MutatedFilesNeverCrashTheReader) {
  std::mt19937 rng(20261123);
  std::size_t ok = 0;
  for (int round = 0; round < 1000; ++round) {
    std::string bad = *bytes_;
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      const std::size_t at = rng() % bad.size();
      switch (rng() % 5) {
        case 0: bad[at] = static_cast<char>(rng()); break;
        case 1: bad.resize(at); break;
        case 2: bad.insert(at, std::string(1 + rng() % 40, static_cast<char>(rng()))); break;
        case 3: bad.erase(at, rng() % 64); break;
        case 4: {  // a chunk duplicated elsewhere: valid checksum, wrong place
          const ChunkSpan& s = (*spans_)[rng() % spans_->size()];
          bad.insert(at, bytes_->substr(s.offset, s.size));
          break;
        }
      }
      if (bad.empty()) bad = "x";
    }
    auto t = trace::ParseGpumemTrace(bad, "fuzz.gpumem");
    if (t.ok()) {
      ++ok;
      for (const trace::Event& e : t->events) ASSERT_LT(e.stack_id, t->stacks.size());
    } else {
      ASSERT_EQ(t.status().message().find('\n'), std::string::npos);
    }
  }
  EXPECT_GT(ok, 50u) << "most single mutations should leave something readable";
}

// The same, one level down: mutated record payloads wrapped in chunks whose checksums
// hold, so the damage reaches the record decoder (the CRC stops it above).
TEST_F(RecoveryTest, MutatedRecordsInValidChunksNeverCrashTheReader) {
  std::vector<std::string> payloads;
  for (const ChunkSpan& span : *spans_) {
    if (span.kind != format::ChunkKind::kRecords) continue;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes_->data()) + span.offset;
    auto header = format::ParseChunkHeader(p);
    ASSERT_TRUE(header.has_value());
    auto payload = format::DecodePayload(p + format::kChunkHeaderSize, *header);
    ASSERT_TRUE(payload.has_value());
    payloads.push_back(*payload);
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 1000; ++round) {
    std::string file = format::FilePrefix();
    for (std::size_t c = 0; c < payloads.size(); ++c) {
      std::string payload = payloads[c];
      if (rng() % 3 == 0 && !payload.empty()) {
        const std::size_t at = rng() % payload.size();
        switch (rng() % 3) {
          case 0: payload[at] = static_cast<char>(rng()); break;
          case 1: payload.resize(at); break;
          case 2: payload.insert(at, std::string(1 + rng() % 12, static_cast<char>(rng()))); break;
        }
      }
      format::AppendChunk(&file, format::ChunkKind::kRecords, static_cast<std::uint32_t>(c),
                          payload);
    }
    auto t = trace::ParseGpumemTrace(file, "records.gpumem");
    ASSERT_TRUE(t.ok()) << t.status();  // every chunk is valid: something always reads
    for (const trace::Event& e : t->events) ASSERT_LT(e.stack_id, t->stacks.size());
  }
}

// A child records events, flushing now and then and telling the parent through a pipe
// how many it had recorded at each flush; the parent SIGKILLs it mid-recording. Every
// event flushed before the kill must read back.
TEST(SigkillTest, KilledRecorderLosesNothingFlushed) {
  const std::string path = TempPath("sigkill.gpumem");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    TraceWriterOptions options;
    options.path = path;
    options.flush_interval_ms = 5;
    auto writer = TraceWriter::Open(options);
    if (!writer.ok()) _exit(3);
    for (std::uint64_t i = 0;; ++i) {
      RawRecord r;
      r.type = format::RecordType::kAlloc;
      r.time_ns = TraceWriter::NowNs();
      r.addr = i;
      r.size = 64;
      (*writer)->Record(r);
      if (i % 97 == 96) {
        (*writer)->Flush();
        const std::uint64_t flushed = i + 1;
        if (write(fds[1], &flushed, sizeof(flushed)) != sizeof(flushed)) _exit(4);
      }
    }
  }
  close(fds[1]);
  std::uint64_t last = 0;
  std::uint64_t value;
  while (last < 20000 && read(fds[0], &value, sizeof(value)) == sizeof(value)) last = value;
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  // The child may have flushed more after our last read: take its last word.
  while (read(fds[0], &value, sizeof(value)) == sizeof(value)) last = value;
  close(fds[0]);
  ASSERT_GE(last, 20000u);

  std::string bytes = ReadBytes(path);
  trace::GpumemFileInfo info;
  auto t = trace::ParseGpumemTrace(bytes, path, &info);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(info.complete);
  EXPECT_TRUE(AnyWarningHas(*t, "did not finish"));
  const std::size_t n = PrefixLength(*t);
  ASSERT_NE(n, static_cast<std::size_t>(-1)) << "recovered events have a hole";
  EXPECT_GE(n, last) << "events flushed before the kill were lost";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gpumem
