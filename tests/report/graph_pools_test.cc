// CUDA graph pools bounded by the Python package's notes: a graph kept every epoch keeps
// all the memory its capture needed, and the report names the capture, called from where
// the graph was kept; graphs dropped in time are no leak.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "profiler/graph_pool_ledger.h"
#include "profiler/graph_pool_note.h"
#include "tools/report/graph_pools.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/report/synthetic_builder.h"
#include "tools/report/terminal_report.h"

namespace gpumem::report {
namespace {

using format::GraphPoolChange;
using synthetic::kMiB;

constexpr std::uint64_t kBase = 0x7f0000000000ull;

std::string Note(std::uint64_t pool, GraphPoolChange change) {
  return format::GraphPoolNoteText({{pool, 0}, change});
}

// Each epoch captures a training step into a graph with its own pool: 127 MiB of
// activations freed inside the capture and a 1 MiB output the graph keeps, then replays
// it five times (five steps). `keep`: every epoch's graph stays alive (kept in a dict);
// else the previous epoch's is released once the new one is captured.
// `capture`: the user frames of the capture (innermost first), under the script's
// top level. Each epoch the loop also takes a batch (`batch`, its user frames), as a
// script does: by then a capture in a helper has returned.
trace::Trace GraphsCapturedEachEpoch(
    bool keep, int epochs,
    const std::vector<trace::Frame>& capture = {{"train.py", 40, "graphed_step"},
                                                {"train.py", 61, "train"}},
    const std::vector<trace::Frame>& batch_frames = {{"train.py", 62, "train"}}) {
  synthetic::Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t captured = b.Stack(capture);
  const std::uint32_t batch = b.Stack(batch_frames);
  b.Segment(kBase, 128 * kMiB);
  b.Alloc(kBase, 128 * kMiB, params);
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const std::uint64_t pool = kBase + static_cast<std::uint64_t>(epoch) * 256 * kMiB;
    b.Note(Note(0, GraphPoolChange::kCaptureBegins));  // a new pool: named at its end
    b.Segment(pool, 128 * kMiB);
    b.Alloc(pool, 127 * kMiB, captured);
    b.Alloc(pool + 127 * kMiB, 1 * kMiB, captured);
    b.Free(pool, 127 * kMiB, captured);
    b.Note(Note(epoch, GraphPoolChange::kCaptureEnds));
    if (!keep && epoch > 1) {
      const std::uint64_t old = pool - 256 * kMiB;
      b.Free(old + 127 * kMiB, 1 * kMiB, captured);
      b.Note(Note(epoch - 1, GraphPoolChange::kReleased));
    }
    b.Alloc(kBase + 64 * kMiB, 64, batch);
    b.Free(kBase + 64 * kMiB, 64, batch);
    for (int replay = 0; replay < 5; ++replay) b.Step();
  }
  return b.Take();
}

TEST(GraphPools, MarksLandAroundTheEventsOfTheirCapture) {
  const trace::Trace t = GraphsCapturedEachEpoch(false, 2);
  const std::vector<GraphPoolMark> marks = FindGraphPoolMarks(t);
  ASSERT_EQ(marks.size(), 5u);
  EXPECT_EQ(marks[0].note.change, GraphPoolChange::kCaptureBegins);
  EXPECT_EQ(t.events[marks[0].before_event].action, trace::Action::kSegmentAlloc);
  EXPECT_EQ(marks[1].note.change, GraphPoolChange::kCaptureEnds);
  EXPECT_EQ(t.events[marks[1].before_event - 1].action, trace::Action::kFreeCompleted);
  EXPECT_EQ(marks[4].note.change, GraphPoolChange::kReleased);
  EXPECT_EQ(marks[4].note.pool, marks[1].note.pool);
}

TEST(GraphPools, AGraphKeptEveryEpochIsALeakNamedWhereItWasCapturedAndKept) {
  const trace::Trace t = GraphsCapturedEachEpoch(true, 30);
  const Report r = BuildReport(t, {});
  ASSERT_FALSE(r.leaks.suspects.empty());
  const LeakSuspect& s = r.leaks.suspects[0];
  EXPECT_EQ(s.name, "train.py:40 graphed_step");
  EXPECT_EQ(s.kept_through, "train.py:61 train");
  // 128 MiB a graph, every five steps.
  EXPECT_NEAR(s.bytes_per_step, 128.0 * kMiB / 5, 4.0 * kMiB);
}

// Out of memory with the kept pools' free memory in pieces as large as the request: the
// kept graphs are the leak that caused it, not memory merely held apart.
TEST(GraphPools, TheOomAfterGraphsKeptEveryEpochIsALeak) {
  trace::Trace t = GraphsCapturedEachEpoch(true, 30);
  trace::Event oom;
  oom.action = trace::Action::kOom;
  oom.size = 64 * kMiB;
  oom.device_free = 16 * kMiB;
  oom.time_us = t.events.back().time_us + 10;
  t.events.push_back(oom);
  t.device_capacity = 128 * kMiB * 31 + 32 * kMiB;
  const Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
  EXPECT_EQ(r.ooms[0].fix, kGraphPoolLeakFix);
  EXPECT_NE(r.ooms[0].evidence.find("held by blocks and CUDA graph pools"), std::string::npos)
      << r.ooms[0].evidence;
  const std::string text = FormatTerminal(r, false);
  EXPECT_NE(text.find("train.py:40 graphed_step, called from train.py:61 train"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("with the memory of the CUDA graph pools captured here"), std::string::npos)
      << text;
}

// A capture in the loop's own function is named alone, with the graph pools it holds.
void ExpectCaptureNamedAlone(const trace::Trace& t) {
  const Report r = BuildReport(t, {});
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_EQ(r.leaks.suspects[0].name, "train.py:40 train");
  EXPECT_EQ(r.leaks.suspects[0].kept_through, "");
  EXPECT_TRUE(r.leaks.suspects[0].holds_graph_pools);
}

// Called from the script's top level: the call tells nothing.
TEST(GraphPools, ACaptureCalledFromTheTopLevelIsNamedAlone) {
  ExpectCaptureNamedAlone(GraphsCapturedEachEpoch(true, 30, {{"train.py", 40, "train"}}));
}

// Called by `main`: the loop's function never returns while it keeps the graphs.
TEST(GraphPools, ACaptureInTheLoopsOwnFunctionIsNamedAlone) {
  ExpectCaptureNamedAlone(GraphsCapturedEachEpoch(
      true, 30, {{"train.py", 40, "train"}, {"train.py", 90, "main"}},
      {{"train.py", 62, "train"}, {"train.py", 90, "main"}}));
}

TEST(GraphPools, GraphsDroppedOnceReplacedAreNoLeak) {
  const trace::Trace t = GraphsCapturedEachEpoch(false, 30);
  const Report r = BuildReport(t, {});
  EXPECT_TRUE(r.leaks.suspects.empty()) << r.leaks.suspects[0].name;
}

// Without the notes (a trace from before them, or no Python package), the pools' free
// memory is the allocator's cache: only the kept outputs grow, named with the call they
// outlived as any site's kept blocks are.
TEST(GraphPools, WithoutNotesOnlyTheKeptBlocksCount) {
  trace::Trace t = GraphsCapturedEachEpoch(true, 30);
  t.annotations.clear();
  const Report r = BuildReport(t, {});
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_NEAR(r.leaks.suspects[0].bytes_per_step, 1.0 * kMiB / 5, 0.1 * kMiB);
  EXPECT_FALSE(r.leaks.suspects[0].holds_graph_pools);
  EXPECT_EQ(r.leaks.suspects[0].kept_through, "train.py:61 train");
}

// PyTorch names a new pool once its capture ends; a capture into a pool named earlier
// (shared) says it from the start.
TEST(GraphPoolNote, NewPoolsAreNumberedAtTheirBeginAndJoinedByTheIdTheirEndNames) {
  format::GraphPoolNumbers numbers;
  using format::kNewGraphPool;
  const format::GraphPoolId first{1, 0}, second{2, 0};
  EXPECT_EQ(numbers.Number(0, {kNewGraphPool, GraphPoolChange::kCaptureBegins}), 0u);
  EXPECT_EQ(numbers.Number(0, {first, GraphPoolChange::kCaptureEnds}), 0u);
  EXPECT_EQ(numbers.Number(1, {kNewGraphPool, GraphPoolChange::kCaptureBegins}), 1u);
  EXPECT_EQ(numbers.Number(1, {second, GraphPoolChange::kCaptureEnds}), 1u);
  EXPECT_EQ(numbers.Number(0, {first, GraphPoolChange::kCaptureBegins}), 0u);  // shared
  EXPECT_EQ(numbers.Number(0, {first, GraphPoolChange::kCaptureEnds}), 0u);
  EXPECT_EQ(numbers.Number(0, {first, GraphPoolChange::kReleased}), 0u);
  EXPECT_EQ(numbers.Number(1, {second, GraphPoolChange::kReleased}), 1u);
  EXPECT_EQ(numbers.Number(0, {second, GraphPoolChange::kReleased}), 2u);  // another device's
}

// The memory a pool holds: the most its blocks took at once, until it is released; opened
// again, from what its blocks hold then.
TEST(GraphPoolLedger, APoolHoldsItsPeakUntilReleasedAndAfterReopeningStartsFromItsBlocks) {
  format::GraphPoolLedger ledger;
  const format::GraphPoolId id{4, 0};
  EXPECT_EQ(ledger.OnNote(0, {format::kNewGraphPool, GraphPoolChange::kCaptureBegins}).add, 0u);
  const std::uint32_t pool = ledger.Capturing(0);
  ASSERT_NE(pool, 0u);
  EXPECT_EQ(ledger.Join(pool, 77), 77u);
  EXPECT_EQ(ledger.Join(pool, 78), 77u);  // its first block's owner
  ledger.BlockChanged(pool, 100, true);
  ledger.BlockChanged(pool, 20, true);
  const auto freed = ledger.BlockChanged(pool, 100, false);  // the bytes stay the pool's
  EXPECT_EQ(freed.owner, 77u);
  EXPECT_EQ(freed.add, 100u);
  ledger.OnNote(0, {id, GraphPoolChange::kCaptureEnds});
  EXPECT_EQ(ledger.Capturing(0), 0u);
  EXPECT_EQ(ledger.OnNote(0, {id, GraphPoolChange::kReleased}).take, 100u);
  ledger.OnNote(0, {id, GraphPoolChange::kCaptureBegins});  // a shared pool, named
  EXPECT_EQ(ledger.Capturing(0), pool);
  ledger.BlockChanged(pool, 10, true);
  EXPECT_EQ(ledger.BlockChanged(pool, 10, false).add, 10u);  // held 30 again, not 120
  EXPECT_EQ(ledger.Owners(), std::vector<std::uint64_t>{77});
}

TEST(GraphPoolNote, TextReadsBack) {
  const format::GraphPoolNote note{{3, 18446744073709551615ull}, GraphPoolChange::kReleased};
  const std::string text = format::GraphPoolNoteText(note);
  EXPECT_EQ(text, "gpumem: graph pool 3.18446744073709551615: released");
  const std::optional<format::GraphPoolNote> back = format::ParseGraphPoolNote(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->pool, note.pool);
  EXPECT_EQ(back->change, note.change);
  EXPECT_FALSE(format::ParseGraphPoolNote("gpumem: graph pool 3: released").has_value());
  EXPECT_FALSE(format::ParseGraphPoolNote("gpumem: graph pool 1.2: grew").has_value());
}

}  // namespace
}  // namespace gpumem::report
