// Bounded loss on any cut (docs/trace-format.md, "What a cut costs"): real traces
// recorded on an H100, and one written here by many threads at once, cut at every chunk
// boundary and at random points, as a full disk or an interrupted copy leaves them. Each
// cut must give back every event of every records chunk that ends before it; a cut with
// no such event is an error, not an empty trace. Each records chunk of the writer holds
// at most records_per_chunk events, so that is the most a cut loses before it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
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

// The bound the docs state, in events, on top of the cut chunk: a cut keeps every
// complete records chunk before it.
constexpr std::size_t kStatedBound = 0;

// Events of each records chunk, counted alone: the file prefix and header chunk followed
// by that one chunk (the reader then warns of the missing sequence numbers).
struct ChunkEvents {
  std::size_t end;  // offset just past the chunk
  std::size_t events;
};

std::vector<ChunkEvents> CountPerChunk(const std::string& bytes) {
  const std::vector<ChunkSpan> spans = WalkChunks(bytes);
  const std::string head = bytes.substr(0, spans.at(0).offset + spans.at(0).size);
  std::vector<ChunkEvents> out;
  for (const ChunkSpan& s : spans) {
    std::size_t n = 0;
    if (s.kind == format::ChunkKind::kRecords) {
      auto t = trace::ParseGpumemTrace(head + bytes.substr(s.offset, s.size), "one-chunk");
      n = t.ok() ? t->events.size() : 0;
    }
    out.push_back({s.offset + s.size, n});
  }
  return out;
}

std::size_t CompleteBefore(const std::vector<ChunkEvents>& chunks, std::size_t cut) {
  std::size_t n = 0;
  for (const ChunkEvents& c : chunks) {
    if (c.end <= cut) n += c.events;
  }
  return n;
}

// Cuts `bytes` at `cut` and checks the bound and what the reader says it lost.
void CheckCut(const std::string& bytes, const std::vector<ChunkEvents>& chunks,
              std::size_t cut) {
  const std::size_t complete = CompleteBefore(chunks, cut);
  auto t = trace::ParseGpumemTrace(absl::string_view(bytes).substr(0, cut), "cut.gpumem");
  if (!t.ok()) {
    ASSERT_EQ(complete, 0u) << "cut at " << cut << ": " << t.status();
    EXPECT_TRUE(absl::IsDataLoss(t.status()) || absl::IsInvalidArgument(t.status()))
        << t.status();
    return;
  }
  ASSERT_GE(t->events.size() + kStatedBound, complete) << "cut at " << cut;
  if (cut == bytes.size()) return;  // the whole file: nothing lost
  ASSERT_TRUE(t->loss.has_value()) << "cut at " << cut;
  EXPECT_EQ(t->loss->events_kept, t->events.size());
  EXPECT_EQ(t->loss->file_bytes, cut);
  EXPECT_LE(t->loss->data_end, cut);
  EXPECT_EQ(t->loss->bytes_lost, cut - t->loss->data_end) << "cut at " << cut;
  EXPECT_NE(t->loss->summary.find("recovered " + std::to_string(t->events.size()) + " events"),
            std::string::npos)
      << t->loss->summary;
  EXPECT_EQ(t->warnings.front(), t->loss->summary);
}

void CutEverywhere(const std::string& bytes, std::size_t random_cuts, std::size_t max_per_chunk) {
  const std::vector<ChunkEvents> chunks = CountPerChunk(bytes);
  std::size_t total = 0;
  for (const ChunkEvents& c : chunks) {
    EXPECT_LE(c.events, max_per_chunk) << "chunk ending at " << c.end;
    total += c.events;
  }
  auto whole = trace::ParseGpumemTrace(bytes, "whole.gpumem");
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->events.size(), total) << "chunks counted alone add up to the file";
  for (const ChunkEvents& c : chunks) {
    CheckCut(bytes, chunks, c.end);
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::mt19937_64 rng(19);
  std::uniform_int_distribution<std::size_t> at(0, bytes.size());
  for (std::size_t i = 0; i < random_cuts; ++i) {
    CheckCut(bytes, chunks, at(rng));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

std::string RealTrace(const std::string& relative) {
  const std::string bytes = ReadBytes(std::string(GPUMEM_TEST_DATA) + "/" + relative);
  EXPECT_FALSE(bytes.empty()) << relative;
  return bytes;
}

// gpt2 on an H100 (format version 2, 100,387 events in 169 records chunks and two journal
// regions): a thousand random cuts.
TEST(TraceCutTest, RealGpt2TraceKeepsEveryCompleteChunk) {
  const std::string bytes =
      RealTrace("../gpu/results/h100-2026-11-23b/gpt2-run-stitching.gpumem");
  ASSERT_FALSE(bytes.empty());
  CutEverywhere(bytes, 1000, 16384);  // written when a chunk held up to 16384 events
}

// leaky_mlp on an H100 (format version 1, 2,713 events in 21 records chunks).
TEST(TraceCutTest, RealLeakyMlpTraceKeepsEveryCompleteChunk) {
  const std::string bytes = RealTrace("leaky_mlp_pair.gpumem");
  ASSERT_FALSE(bytes.empty());
  CutEverywhere(bytes, 1000, 16384);
}

// Eight threads fill their rings before one drain: the drain's batch is split so that
// no records chunk holds more than records_per_chunk events.
TEST(TraceCutTest, OneBigDrainIsSplitIntoBoundedChunks) {
  TraceWriterOptions options;
  options.path = TempPath("trace_cut.gpumem");
  options.flush_interval_ms = 3600000;
  options.ring_records = 4096;
  const TraceWriterOptions defaults;
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<std::thread> threads;
  for (int l = 0; l < 8; ++l) {
    threads.emplace_back([w = writer->get(), l] {
      for (std::uint64_t i = 0; i < 1900; ++i) {  // under half a ring: no early drain
        RawRecord r;
        r.type = format::RecordType::kAlloc;
        r.time_ns = TraceWriter::NowNs();
        r.addr = (std::uint64_t(l) << 32) | i;
        r.size = 512;
        r.thread = TraceWriter::ThreadId();
        w->Record(r);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE((*writer)->Close().ok());
  const std::string bytes = ReadBytes(options.path);
  std::remove(options.path.c_str());
  const std::vector<ChunkEvents> chunks = CountPerChunk(bytes);
  std::size_t records_chunks = 0;
  for (const ChunkEvents& c : chunks) records_chunks += c.events > 0;
  EXPECT_GE(records_chunks, 8u * 1900 / defaults.records_per_chunk);
  CutEverywhere(bytes, 200, defaults.records_per_chunk);
}

// A killed run's file cut inside a journal region (an interrupted copy): the slots before
// the cut still give back their records.
TEST(TraceCutTest, CutInsideAKilledRunsJournalKeepsTheSlotsBeforeIt) {
  TraceWriterOptions options;
  options.path = TempPath("cut_journal.gpumem");
  options.flush_interval_ms = 3600000;
  options.sync_interval_ms = 0;
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (std::uint64_t i = 0; i < 300; ++i) {
    RawRecord r;
    r.type = format::RecordType::kAlloc;
    r.time_ns = TraceWriter::NowNs();
    r.addr = i;
    r.size = 512;
    (*writer)->Record(r);
  }
  // The file as a kill would leave it: nothing compressed yet, every record in the journal.
  const std::string bytes = ReadBytes(options.path);
  ASSERT_TRUE((*writer)->Close().ok());
  std::remove(options.path.c_str());
  std::size_t journal_at = 0;
  for (const ChunkSpan& s : WalkChunks(bytes)) {
    if (s.kind == format::ChunkKind::kJournal) journal_at = s.offset;
  }
  ASSERT_GT(journal_at, 0u);
  const std::size_t lead =
      format::GetU32(reinterpret_cast<const unsigned char*>(bytes.data()) + journal_at +
                     format::kChunkHeaderSize + 12);
  const std::size_t slots_at =
      journal_at + format::kChunkHeaderSize + format::kJournalHeaderBytes + lead;
  const std::size_t cut = slots_at + 100 * format::kJournalRecordBytes + 17;
  auto t = trace::ParseGpumemTrace(absl::string_view(bytes).substr(0, cut), "cut.gpumem");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 100u);
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(t->events[i].addr, i);
  ASSERT_TRUE(t->loss.has_value());
  EXPECT_NE(t->loss->summary.find("100 from the raw journal"), std::string::npos)
      << t->loss->summary;
  EXPECT_NE(t->loss->summary.find("ends inside the journal chunk at offset " +
                                  std::to_string(journal_at)),
            std::string::npos)
      << t->loss->summary;
}

// A machine crash keeps what reached the disk: the sync thread fdatasyncs every chunk
// written, within its interval; with the interval 0 there is no sync thread.
TEST(TraceCutTest, ChunksReachTheDiskWithinTheSyncInterval) {
  for (int interval : {5, 0}) {
    TraceWriterOptions options;
    options.path = TempPath("cut_sync.gpumem");
    options.sync_interval_ms = interval;
    auto writer = TraceWriter::Open(options);
    ASSERT_TRUE(writer.ok()) << writer.status();
    RawRecord r;
    r.type = format::RecordType::kAlloc;
    r.time_ns = TraceWriter::NowNs();
    (*writer)->Record(r);
    (*writer)->Flush();
    const std::uint64_t written = (*writer)->chunks_written();
    EXPECT_GE(written, 2u);  // the header and the records
    for (int i = 0; i < 500 && (*writer)->chunks_synced() < written; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (interval == 0 && i == 5) break;  // nothing to wait for
    }
    EXPECT_EQ((*writer)->chunks_synced(), interval > 0 ? written : 0u) << "interval " << interval;
    ASSERT_TRUE((*writer)->Close().ok());
    std::remove(options.path.c_str());
  }
}

}  // namespace
}  // namespace gpumem
