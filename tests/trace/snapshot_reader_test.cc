#include "tools/trace/snapshot_reader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tools/trace/load.h"
#include "tools/trace/pickle_writer.h"
#include "tests/trace/test_support.h"

namespace gpumem::trace {
namespace {

std::vector<std::string> StackText(const Trace& t, std::uint32_t stack_id) {
  std::vector<std::string> out;
  for (std::uint32_t f : t.stacks[stack_id]) {
    const Frame& fr = t.frames[f];
    out.push_back(fr.filename + ":" + std::to_string(fr.line) + ":" + fr.function);
  }
  return out;
}

constexpr std::size_t kTsvMaxFrames = 12;

// The .tsv.gz files were flattened from the pickles independently (by Python), so the
// pickle reader must give the same events, after the synthesized prelude.
void ExpectSameAsTsv(const std::string& name) {
  auto pickle = LoadTrace(Data(name + ".pickle.xz"));
  ASSERT_TRUE(pickle.ok()) << pickle.status();
  auto tsv = LoadTrace(Data(name + ".trace.tsv.gz"));
  ASSERT_TRUE(tsv.ok()) << tsv.status();
  EXPECT_EQ(pickle->format, "pytorch-snapshot");
  ASSERT_GE(pickle->events.size(), tsv->events.size());
  const std::size_t prelude = pickle->events.size() - tsv->events.size();
  // Each recording started after torch.zeros(1) (capture.py): one 2 MiB segment predates it.
  ASSERT_EQ(prelude, 1u) << name;
  EXPECT_EQ(pickle->events[0].action, Action::kSegmentAlloc);
  EXPECT_EQ(pickle->events[0].size, 2u << 20);
  EXPECT_EQ(pickle->events[0].time_us, pickle->events[1].time_us);
  ASSERT_EQ(pickle->warnings.size(), 1u);
  EXPECT_EQ(pickle->warnings[0],
            "1 segments (or mapped pieces of expandable ones) existed before the recording started: "
            "synthesized their segment_alloc / segment_map at the start");
  for (std::size_t i = 0; i < tsv->events.size(); ++i) {
    const Event& a = pickle->events[prelude + i];
    const Event& b = tsv->events[i];
    ASSERT_EQ(a.action, b.action) << name << " event " << i;
    ASSERT_EQ(a.addr, b.addr) << name << " event " << i;
    ASSERT_EQ(a.size, b.size) << name << " event " << i;
    ASSERT_EQ(a.stream, b.stream) << name << " event " << i;
    ASSERT_EQ(a.time_us, b.time_us) << name << " event " << i;
    // The TSV keeps at most the 12 innermost frames of a stack.
    std::vector<std::string> stack = StackText(*pickle, a.stack_id);
    if (stack.size() > kTsvMaxFrames) stack.resize(kTsvMaxFrames);
    ASSERT_EQ(stack, StackText(*tsv, b.stack_id)) << name << " event " << i;
  }
  EXPECT_GE(pickle->frames.size(), tsv->frames.size());
}

TEST(SnapshotReaderTest, LeakyMlpMatchesItsTsv) { ExpectSameAsTsv("leaky_mlp"); }
TEST(SnapshotReaderTest, LargerSnapshotsMatchTheirTsv) {
  if (kSanitized) GTEST_SKIP() << "large inputs run in the plain build; leaky_mlp runs here";
  ExpectSameAsTsv("gpt2");
  ExpectSameAsTsv("resnet50");
  ExpectSameAsTsv("varlen_bert");
}

// Figures from Python's pickle on the same file: 85 segments holding 86 blocks, 3 of them
// allocated; 240 annotations, the first a START of Optimizer.step#SGD.step.
TEST(SnapshotReaderTest, LeakyMlpEndStateAndAnnotations) {
  auto t = LoadTrace(Data("leaky_mlp.pickle.xz"));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->segments.size(), 85u);
  std::size_t blocks = 0, allocated = 0;
  for (const Segment& s : t->segments) {
    blocks += s.blocks.size();
    for (const SegmentBlock& b : s.blocks) allocated += b.allocated;
  }
  EXPECT_EQ(blocks, 86u);
  EXPECT_EQ(allocated, 3u);
  EXPECT_EQ(t->segments[0].addr, 140144849977344u);
  EXPECT_EQ(t->segments[0].total_size, 16777216u);
  EXPECT_TRUE(t->segments[0].is_large_pool);
  EXPECT_FALSE(t->expandable_segments);
  ASSERT_EQ(t->annotations.size(), 240u);
  EXPECT_EQ(t->annotations[0].name, "Optimizer.step#SGD.step");
  EXPECT_TRUE(t->annotations[0].start);
  EXPECT_FALSE(t->annotations[1].start);
  EXPECT_EQ(t->annotations[0].time_us, 1795359228405612);
}

// A small snapshot written by hand, one event a dict.
struct Ev {
  const char* action;
  std::uint64_t addr;
  std::uint64_t size;
};

void WriteEvent(PickleWriter& w, const Ev& e) {
  w.BeginDict();
  w.String("action");
  w.String(e.action);
  w.String("addr");
  w.Uint(e.addr);
  w.String("size");
  w.Uint(e.size);
  w.String("stream");
  w.Int(0);
  w.String("time_us");
  w.Int(100);
  w.String("frames");
  w.BeginList();
  w.BeginDict();
  w.String("filename");
  w.String("a.py");
  w.String("line");
  w.Int(3);
  w.String("name");
  w.String("f");
  w.EndDict();
  w.EndList();
  w.EndDict();
}

// The segments list; `with_end_state`: one segment at 0x10000 no event created, with a
// live block no event touched.
void WriteSegments(PickleWriter& w, bool with_end_state) {
  w.BeginList();
  if (with_end_state) {
    w.BeginDict();
    w.String("address");
    w.Uint(0x10000);
    w.String("total_size");
    w.Uint(0x200000);
    w.String("blocks");
    w.BeginList();
    w.BeginDict();
    w.String("address");
    w.Uint(0x10000);
    w.String("size");
    w.Uint(512);
    w.String("state");
    w.String("active_allocated");
    w.EndDict();
    w.EndList();
    w.EndDict();
  }
  w.EndList();
}

std::string Snapshot(const std::vector<Ev>& events, bool with_end_state) {
  PickleWriter w;
  w.BeginDict();
  w.String("device_traces");
  w.BeginList();
  w.BeginList();
  for (const Ev& e : events) WriteEvent(w, e);
  w.EndList();
  w.EndList();
  w.String("segments");
  WriteSegments(w, with_end_state);
  w.EndDict();
  return std::move(w).Finish();
}

TEST(SnapshotReaderTest, RebuildsTheStateAtTheFirstEvent) {
  auto t = ParseSnapshotPickle(Snapshot({{"free_requested", 0x9000, 512},
                                         {"free_completed", 0x9000, 512},
                                         {"free_completed", 0xa000, 1024},
                                         {"segment_free", 0x800000, 0x200000},
                                         {"alloc", 0x9000, 512}},
                                        true),
                               "t.pkl");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::pair<Action, std::uint64_t>> got;
  for (const Event& e : t->events) got.emplace_back(e.action, e.addr);
  const std::vector<std::pair<Action, std::uint64_t>> want = {
      {Action::kSegmentAlloc, 0x800000},   // freed in the trace, never allocated
      {Action::kSegmentAlloc, 0x10000},    // exists at the end, never allocated
      {Action::kAlloc, 0x9000},            // freed, never allocated
      {Action::kAlloc, 0xa000},            // free_completed first: alloc + free_requested
      {Action::kFreeRequested, 0xa000},
      {Action::kAlloc, 0x10000},           // live at the end, never touched
      {Action::kFreeRequested, 0x9000},
      {Action::kFreeCompleted, 0x9000},
      {Action::kFreeCompleted, 0xa000},
      {Action::kSegmentFree, 0x800000},
      {Action::kAlloc, 0x9000}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(t->warnings.size(), 3u);
  EXPECT_EQ(t->warnings[1],
            "2 blocks freed in the trace were allocated before it started: synthesized their allocs at the start");
  for (const Event& e : t->events) EXPECT_EQ(e.time_us, 100);
}

// torch.cuda.memory._snapshot() taken with history never recorded, and the list of
// segments torch.cuda.memory_snapshot() returns: the blocks live then are read, and the
// first warning says how to record what leak detection needs.
TEST(SnapshotReaderTest, ASnapshotWithoutHistoryIsReadAndSaysHowToRecordOne) {
  PickleWriter segments_alone;
  WriteSegments(segments_alone, true);
  for (const std::string& data : {Snapshot({}, true), std::move(segments_alone).Finish()}) {
    auto t = ParseSnapshotPickle(data, "t.pkl");
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->events.size(), 2u);  // its segment and the block live in it
    EXPECT_EQ(t->events[1].action, Action::kAlloc);
    EXPECT_EQ(t->events[1].size, 512u);
    ASSERT_FALSE(t->warnings.empty());
    EXPECT_TRUE(absl::StartsWith(t->warnings[0], "the snapshot holds no allocation history"))
        << t->warnings[0];
    EXPECT_NE(t->warnings[0].find("_record_memory_history(max_entries=100000)"),
              std::string::npos);
  }
  // With history, no such warning.
  auto with = ParseSnapshotPickle(Snapshot({{"alloc", 0x9000, 512}}, true), "t.pkl");
  ASSERT_TRUE(with.ok()) << with.status();
  for (const std::string& w : with->warnings) {
    EXPECT_FALSE(absl::StartsWith(w, "the snapshot holds no allocation history")) << w;
  }
}

// Expandable segments grow by segment_map events inside one virtual range: the pieces of
// an end-state segment that no mapping in the trace covers are mapped at the start.
TEST(SnapshotReaderTest, ExpandableSegmentsAreKnownByTheirMappings) {
  PickleWriter w;
  w.BeginDict();
  w.String("device_traces");
  w.BeginList();
  w.BeginList();
  WriteEvent(w, {"segment_map", 0x40200000, 0x200000});
  w.EndList();
  w.EndList();
  w.String("segments");
  w.BeginList();
  for (std::uint64_t addr : {0x40000000ull, 0x80000000ull}) {
    w.BeginDict();
    w.String("address");
    w.Uint(addr);
    w.String("total_size");
    w.Uint(0x400000);
    w.String("is_expandable");
    w.Bool(true);
    w.String("blocks");
    w.BeginList();
    w.EndList();
    w.EndDict();
  }
  w.EndList();
  w.EndDict();
  auto t = ParseSnapshotPickle(std::move(w).Finish(), "t.pkl");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::tuple<Action, std::uint64_t, std::uint64_t>> got;
  for (const Event& e : t->events) got.emplace_back(e.action, e.addr, e.size);
  EXPECT_EQ(got, (std::vector<std::tuple<Action, std::uint64_t, std::uint64_t>>{
                     {Action::kSegmentMap, 0x40000000, 0x200000},  // below the trace's mapping
                     {Action::kSegmentMap, 0x80000000, 0x400000},  // never mapped in the trace
                     {Action::kSegmentMap, 0x40200000, 0x200000}}));
  EXPECT_TRUE(t->segments[0].is_expandable);
}

// A real recording with expandable_segments:True (PyTorch 2.11 on an H100,
// tests/trace/data/record_expandable.py): four 4 MiB tensors made before recording, one
// freed during it. After the rebuild, every block event must lie in memory mapped at that
// moment, and the pre-recording blocks are back: 1 freed in the trace, 3 live at the end.
TEST(SnapshotReaderTest, RealExpandableRecordingIsConsistentAfterTheRebuild) {
  auto t = LoadTrace(std::string(GPUMEM_TEST_DATA) + "/../trace/data/expandable_h100.pickle");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->expandable_segments);
  std::map<std::uint64_t, std::uint64_t> mapped;  // start -> size
  auto inside = [&](std::uint64_t addr, std::uint64_t size) {
    auto it = mapped.upper_bound(addr);
    if (it == mapped.begin()) return false;
    --it;
    // mappings are contiguous pieces: walk them while they touch
    std::uint64_t end = it->first + it->second;
    while (end < addr + size) {
      auto next = mapped.find(end);
      if (next == mapped.end()) return false;
      end += next->second;
    }
    return addr >= it->first;
  };
  std::size_t blocks = 0;
  for (const Event& e : t->events) {
    if (e.action == Action::kSegmentMap) mapped[e.addr] = e.size;
    if (e.action == Action::kSegmentUnmap) mapped.erase(e.addr);
    if (e.action == Action::kAlloc) {
      ++blocks;
      EXPECT_TRUE(inside(e.addr, e.size)) << "alloc at " << e.addr << " outside mapped memory";
    }
  }
  EXPECT_GT(blocks, 100u);
  ASSERT_EQ(t->warnings.size(), 3u);
  EXPECT_EQ(t->warnings[1],
            "1 blocks freed in the trace were allocated before it started: synthesized their allocs at the start");
  EXPECT_EQ(t->warnings[2],
            "3 blocks live at the end were allocated before the recording started: synthesized their allocs at the start");
  // The synthesized blocks are the 4 MiB tensors.
  for (std::size_t i = 0; i < t->events.size() && t->events[i].time_us == t->events[0].time_us; ++i) {
    if (t->events[i].action == Action::kAlloc) {
      EXPECT_EQ(t->events[i].size, 4u << 20);
    }
  }
}

// Through LoadTrace, as the CLI sees it: the file's name leads the one-line error.
TEST(SnapshotReaderTest, BadFilesThroughLoadTrace) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  const std::string truncated = write("cut.pickle", Snapshot({{"alloc", 1, 512}}, false).substr(0, 40));
  auto t = LoadTrace(truncated);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StartsWith(t.status().message(), truncated + ": byte ")) << t.status();
  const std::string code = write("code.pickle", "\x80\x04" "cos\nsystem\n.");
  t = LoadTrace(code);
  EXPECT_EQ(t.status().message(), code + ": byte 2: GLOBAL: not supported (snapshots hold only plain data)");
  const std::string empty = write("empty.pickle", "");
  EXPECT_FALSE(LoadTrace(empty).ok());
  // A valid snapshot with no events at all is refused by LoadTrace, not crashed on.
  const std::string no_events = write("none.pickle", Snapshot({}, false));
  EXPECT_FALSE(LoadTrace(no_events).ok());
}

TEST(SnapshotReaderTest, AConsistentTraceGetsNoPrelude) {
  auto t = ParseSnapshotPickle(Snapshot({{"segment_alloc", 0x800000, 0x200000},
                                         {"alloc", 0x800000, 512},
                                         {"free_requested", 0x800000, 512}},
                                        false),
                               "t.pkl");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 3u);
  EXPECT_TRUE(t->warnings.empty());
  // One frame, interned once, shared by the three events.
  EXPECT_EQ(t->frames.size(), 1u);
  EXPECT_EQ(t->events[0].stack_id, t->events[2].stack_id);
}

// Devices are interleaved by time, but each keeps its own order even where its clock goes
// backwards: reordering a device's events would free blocks before their alloc.
TEST(SnapshotReaderTest, DevicesInterleaveByTimeKeepingTheirOrder) {
  PickleWriter w;
  w.BeginDict();
  w.String("device_traces");
  w.BeginList();
  const std::vector<std::vector<std::pair<std::uint64_t, std::int64_t>>> devices = {
      {{0x100, 10}, {0x200, 1000}, {0x300, 20}}, {{0x400, 15}}};
  for (const auto& events : devices) {
    w.BeginList();
    for (const auto& [addr, time] : events) {
      w.BeginDict();
      w.String("action");
      w.String("alloc");
      w.String("addr");
      w.Uint(addr);
      w.String("size");
      w.Int(512);
      w.String("time_us");
      w.Int(time);
      w.EndDict();
    }
    w.EndList();
  }
  w.EndList();
  w.EndDict();
  auto t = ParseSnapshotPickle(std::move(w).Finish(), "t.pkl");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::pair<std::int32_t, std::uint64_t>> got;
  for (const Event& e : t->events) got.emplace_back(e.device, e.addr);
  EXPECT_EQ(got, (std::vector<std::pair<std::int32_t, std::uint64_t>>{
                     {0, 0x100}, {1, 0x400}, {0, 0x200}, {0, 0x300}}));
}

// torch.compile's fake tensors record frames whose line PyTorch could not find as -1 in
// an unsigned 64-bit integer: the frame is kept with line 0, the snapshot read.
TEST(SnapshotReaderTest, AFrameWithoutALineIsKeptWithLineZero) {
  PickleWriter w;
  w.BeginDict();
  w.String("device_traces");
  w.BeginList();
  w.BeginList();
  w.BeginDict();
  w.String("action");
  w.String("alloc");
  w.String("addr");
  w.Uint(0x1000);
  w.String("size");
  w.Uint(512);
  w.String("stream");
  w.Uint(0);
  w.String("time_us");
  w.Uint(7);
  w.String("frames");
  w.BeginList();
  for (std::uint64_t line : {std::numeric_limits<std::uint64_t>::max(), std::uint64_t{12}}) {
    w.BeginDict();
    w.String("filename");
    w.String("fake_tensor.py");
    w.String("line");
    w.Uint(line);
    w.String("name");
    w.String("init_gpu_context");
    w.EndDict();
  }
  w.EndList();
  w.EndDict();
  w.EndList();
  w.EndList();
  w.EndDict();
  auto t = ParseSnapshotPickle(std::move(w).Finish(), "t.pkl");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 1u);
  EXPECT_EQ(StackText(*t, t->events[0].stack_id),
            (std::vector<std::string>{"fake_tensor.py:0:init_gpu_context",
                                      "fake_tensor.py:12:init_gpu_context"}));
}

TEST(SnapshotReaderTest, UnknownActionNamesTheEvent) {
  auto t = ParseSnapshotPickle(Snapshot({{"alloc", 1, 512}, {"malloc", 1, 512}}, false), "t.pkl");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StartsWith(t.status().message(), "t.pkl: byte ")) << t.status();
  EXPECT_TRUE(absl::EndsWith(t.status().message(),
                             ": event device_traces[0][1]: unknown action 'malloc'"))
      << t.status();
}

TEST(SnapshotReaderTest, WrongTypesAreNamed) {
  auto expect_error = [](std::string data, absl::string_view suffix) {
    auto t = ParseSnapshotPickle(data, "t.pkl");
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(absl::StartsWith(t.status().message(), "t.pkl: byte ")) << t.status();
    EXPECT_TRUE(absl::EndsWith(t.status().message(), suffix)) << t.status();
  };
  {
    PickleWriter w;
    w.BeginDict();
    w.String("device_traces");
    w.BeginDict();
    w.EndDict();
    w.EndDict();
    expect_error(std::move(w).Finish(), ": device_traces is a dict, not a list");
  }
  {
    PickleWriter w;
    w.Int(3);
    expect_error(std::move(w).Finish(),
                 ": the snapshot is a int, not a dict with 'segments' and 'device_traces' "
                 "(torch.cuda.memory._snapshot()) or a list of segments "
                 "(torch.cuda.memory_snapshot())");
  }
  {
    PickleWriter w;  // a list is torch.cuda.memory_snapshot()'s segments
    w.BeginList();
    w.Int(3);
    w.EndList();
    expect_error(std::move(w).Finish(), ": segments[0] is a int, not a dict");
  }
  {
    PickleWriter w;
    w.BeginDict();
    w.EndDict();
    expect_error(std::move(w).Finish(), ": the snapshot has no 'device_traces'");
  }
  {
    PickleWriter w;
    w.BeginDict();
    w.String("device_traces");
    w.BeginList();
    w.BeginList();
    w.BeginDict();
    w.String("action");
    w.String("alloc");
    w.String("addr");
    w.Int(-4);
    w.EndDict();
    w.EndList();
    w.EndList();
    w.EndDict();
    expect_error(std::move(w).Finish(), ": device_traces[0][0].addr is not a non-negative integer");
  }
  {
    PickleWriter w;
    w.BeginDict();
    w.String("device_traces");
    w.BeginList();
    w.BeginList();
    w.BeginDict();
    w.String("action");
    w.String("alloc");
    w.String("addr");
    w.Int(4);
    w.EndDict();
    w.EndList();
    w.EndList();
    w.EndDict();
    expect_error(std::move(w).Finish(), ": device_traces[0][0] has no 'size'");
  }
}

}  // namespace
}  // namespace gpumem::trace
