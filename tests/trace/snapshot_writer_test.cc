#include "tools/trace/snapshot_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/trace/load.h"
#include "tools/trace/pickle_reader.h"
#include "tools/trace/snapshot_reader.h"
#include "tests/trace/test_support.h"

namespace gpumem::trace {
namespace {

std::vector<std::string> StackText(const Trace& t, std::uint32_t stack_id) {
  std::vector<std::string> out;
  for (std::uint32_t f : t.stacks[stack_id]) {
    const Frame& fr = t.frames[f];
    out.push_back(absl::StrCat(fr.filename, ":", fr.line, ":", fr.function));
  }
  return out;
}

void ExpectSameTrace(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.events.size(), b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const Event& x = a.events[i];
    const Event& y = b.events[i];
    ASSERT_EQ(x.action, y.action) << i;
    ASSERT_EQ(x.device, y.device) << i;
    ASSERT_EQ(x.addr, y.addr) << i;
    ASSERT_EQ(x.size, y.size) << i;
    ASSERT_EQ(x.stream, y.stream) << i;
    ASSERT_EQ(x.time_us, y.time_us) << i;
    ASSERT_EQ(x.device_free, y.device_free) << i;
    ASSERT_EQ(StackText(a, x.stack_id), StackText(b, y.stack_id)) << i;
  }
  EXPECT_EQ(a.frames.size(), b.frames.size());
  ASSERT_EQ(a.segments.size(), b.segments.size());
  for (std::size_t i = 0; i < a.segments.size(); ++i) {
    const Segment& x = a.segments[i];
    const Segment& y = b.segments[i];
    EXPECT_EQ(x.device, y.device);
    EXPECT_EQ(x.addr, y.addr);
    EXPECT_EQ(x.total_size, y.total_size);
    EXPECT_EQ(x.stream, y.stream);
    EXPECT_EQ(x.is_large_pool, y.is_large_pool);
    EXPECT_EQ(x.is_expandable, y.is_expandable);
    ASSERT_EQ(x.blocks.size(), y.blocks.size());
    for (std::size_t j = 0; j < x.blocks.size(); ++j) {
      EXPECT_EQ(x.blocks[j].addr, y.blocks[j].addr);
      EXPECT_EQ(x.blocks[j].size, y.blocks[j].size);
      EXPECT_EQ(x.blocks[j].requested_size, y.blocks[j].requested_size);
      EXPECT_EQ(x.blocks[j].allocated, y.blocks[j].allocated);
      EXPECT_EQ(StackText(a, x.blocks[j].stack_id), StackText(b, y.blocks[j].stack_id));
    }
  }
  ASSERT_EQ(a.annotations.size(), b.annotations.size());
  for (std::size_t i = 0; i < a.annotations.size(); ++i) {
    EXPECT_EQ(a.annotations[i].name, b.annotations[i].name);
    EXPECT_EQ(a.annotations[i].start, b.annotations[i].start);
    EXPECT_EQ(a.annotations[i].time_us, b.annotations[i].time_us);
    EXPECT_EQ(a.annotations[i].device, b.annotations[i].device);
  }
  EXPECT_EQ(a.expandable_segments, b.expandable_segments);
}

TEST(SnapshotWriterTest, RealSnapshotRoundTrips) {
  std::vector<std::string> names = {"leaky_mlp.pickle.xz"};
  if (!kSanitized) names.push_back("gpt2.pickle.xz");
  for (const std::string& name : names) {
    auto original = LoadTrace(Data(name));
    ASSERT_TRUE(original.ok()) << original.status();
    auto written = WriteSnapshotPickle(*original);
    ASSERT_TRUE(written.ok()) << written.status();
    auto back = ParseSnapshotPickle(*written, "written.pkl");
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameTrace(*original, *back);
    // The prelude the first read synthesized is now plain events: nothing left to repair.
    EXPECT_TRUE(back->warnings.empty()) << back->warnings[0];
  }
}

// A trace with no end state of its own (the TSV form) gets one derived from its events.
// PyTorch's own end state in the matching pickle is the independent reference: every
// segment made during the recording must come out with the same blocks (live ones and
// the coalesced free pieces between them).
TEST(SnapshotWriterTest, EndStateDerivedFromEventsMatchesPyTorchs) {
  auto tsv = LoadTrace(Data("leaky_mlp.trace.tsv.gz"));
  ASSERT_TRUE(tsv.ok()) << tsv.status();
  ASSERT_TRUE(tsv->segments.empty());
  auto written = WriteSnapshotPickle(*tsv);
  ASSERT_TRUE(written.ok()) << written.status();
  auto derived = ParseSnapshotPickle(*written, "w.pkl");
  ASSERT_TRUE(derived.ok()) << derived.status();
  auto pytorch = LoadTrace(Data("leaky_mlp.pickle.xz"));
  ASSERT_TRUE(pytorch.ok()) << pytorch.status();
  // PyTorch's list also holds the one segment made before recording started.
  ASSERT_EQ(derived->segments.size() + 1, pytorch->segments.size());
  std::size_t matched = 0;
  for (const Segment& want : pytorch->segments) {
    auto got = std::find_if(derived->segments.begin(), derived->segments.end(),
                            [&](const Segment& s) { return s.addr == want.addr; });
    if (got == derived->segments.end()) {
      EXPECT_EQ(want.total_size, 2u << 20) << "only the pre-recording segment may be missing";
      continue;
    }
    ++matched;
    EXPECT_EQ(got->total_size, want.total_size);
    ASSERT_EQ(got->blocks.size(), want.blocks.size()) << "segment " << want.addr;
    for (std::size_t j = 0; j < want.blocks.size(); ++j) {
      EXPECT_EQ(got->blocks[j].addr, want.blocks[j].addr);
      EXPECT_EQ(got->blocks[j].size, want.blocks[j].size);
      EXPECT_EQ(got->blocks[j].allocated, want.blocks[j].allocated);
    }
  }
  EXPECT_EQ(matched, derived->segments.size());
}

TEST(SnapshotWriterTest, PendingFreesStayLive) {
  Trace t;
  t.source = "t";
  auto event = [](Action a, std::uint64_t addr, std::uint64_t size) {
    Event e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    return e;
  };
  t.events = {event(Action::kSegmentAlloc, 0x1000, 0x2000), event(Action::kAlloc, 0x1000, 0x800),
              event(Action::kAlloc, 0x1800, 0x800), event(Action::kFreeRequested, 0x1800, 0x800)};
  auto written = WriteSnapshotPickle(t);
  ASSERT_TRUE(written.ok()) << written.status();
  auto tree = ReadPickle(*written, "w.pkl");
  ASSERT_TRUE(tree.ok()) << tree.status();
  const PickleId segments = *tree->Find(tree->root(), "segments");
  ASSERT_EQ(tree->items(segments).size(), 1u);
  const PickleId blocks = *tree->Find(tree->items(segments)[0], "blocks");
  std::vector<std::string> states;
  for (PickleId b : tree->items(blocks)) states.emplace_back(tree->as_string(*tree->Find(b, "state")));
  EXPECT_EQ(states, (std::vector<std::string>{"active_allocated", "active_pending_free", "inactive"}));
}

TEST(SnapshotWriterTest, GpumemOnlyActionsAndOom) {
  Trace t;
  t.source = "t";
  Event step;
  step.action = Action::kStep;
  step.time_us = 5;
  Event oom;
  oom.action = Action::kOom;
  oom.size = 1 << 30;
  oom.device_free = 12345;
  oom.device = 1;
  oom.time_us = 7;
  t.events = {step, oom};
  auto written = WriteSnapshotPickle(t);
  ASSERT_TRUE(written.ok()) << written.status();
  auto back = ParseSnapshotPickle(*written, "w.pkl");
  ASSERT_TRUE(back.ok()) << back.status();
  // The step is not a PyTorch action: it travels as an external annotation.
  ASSERT_EQ(back->events.size(), 1u);
  EXPECT_EQ(back->events[0].action, Action::kOom);
  EXPECT_EQ(back->events[0].device, 1);
  EXPECT_EQ(back->events[0].device_free, 12345u);
  EXPECT_EQ(back->events[0].size, 1u << 30);
  ASSERT_EQ(back->annotations.size(), 1u);
  EXPECT_EQ(back->annotations[0].name, "gpumem.step");
  EXPECT_EQ(back->annotations[0].time_us, 5);
  // Device 0 is listed even though it has no events, as PyTorch does.
  auto tree = ReadPickle(*written, "w.pkl");
  ASSERT_TRUE(tree.ok());
  EXPECT_EQ(tree->items(*tree->Find(tree->root(), "device_traces")).size(), 2u);
}

TEST(SnapshotWriterTest, BadStackIdsAreRefused) {
  Trace t;
  t.source = "t";
  Event e;
  e.stack_id = 3;
  t.events = {e};
  EXPECT_FALSE(WriteSnapshotPickle(t).ok());
}

// Python's own pickle must load what we write, find protocol 4 and only the opcodes
// PyTorch's snapshots use (memory_viz parses those), and see the same events as in the
// original snapshot.
TEST(SnapshotWriterTest, PythonReadsTheExport) {
  if (kSanitized) GTEST_SKIP() << "Python's view does not change under sanitizers; the plain build runs this";
  if (std::system("python3 -c 'import pickle, lzma, pickletools' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with pickle and lzma not found";
  }
  auto original = LoadTrace(Data("leaky_mlp.pickle.xz"));
  ASSERT_TRUE(original.ok()) << original.status();
  auto written = WriteSnapshotPickle(*original);
  ASSERT_TRUE(written.ok()) << written.status();
  const std::string dir = ::testing::TempDir();
  const std::string out = dir + "/gpumem_export_test.pickle";
  const std::string script = dir + "/gpumem_export_check.py";
  std::ofstream(out, std::ios::binary) << *written;
  std::ofstream(script) << R"(import lzma, pickle, pickletools, sys
orig = pickle.load(lzma.open(sys.argv[1]))
raw = open(sys.argv[2], 'rb').read()
ops = [(op.name, arg) for op, arg, _ in pickletools.genops(raw)]
assert ops[0] == ('PROTO', 4), ops[0]
allowed = {'PROTO', 'FRAME', 'STOP', 'MARK', 'EMPTY_DICT', 'EMPTY_LIST', 'SETITEMS', 'APPENDS',
           'APPEND', 'MEMOIZE', 'BINGET', 'LONG_BINGET', 'LONG1', 'BININT', 'BININT1', 'BININT2',
           'SHORT_BINUNICODE', 'BINUNICODE', 'NEWFALSE', 'NEWTRUE', 'NONE', 'TUPLE2', 'BINFLOAT'}
extra = {name for name, _ in ops} - allowed
assert not extra, extra
ours = pickle.loads(raw)
assert set(ours) >= {'segments', 'device_traces', 'allocator_settings', 'external_annotations'}
keys = ('action', 'addr', 'size', 'stream', 'time_us', 'frames')
a = [{k: e[k] for k in keys} for e in orig['device_traces'][0]]
b = [{k: e[k] for k in keys} for e in ours['device_traces'][0]]
# our export starts with the one segment_alloc synthesized for the segment made before recording
assert len(b) == len(a) + 1, (len(a), len(b))
assert b[0]['action'] == 'segment_alloc', b[0]
assert a == b[1:], 'events differ'
seg_keys = ('device', 'address', 'total_size', 'stream', 'segment_type', 'is_expandable')
assert [{k: s[k] for k in seg_keys} for s in orig['segments']] == [{k: s[k] for k in seg_keys} for s in ours['segments']]
blk_keys = ('address', 'size', 'requested_size', 'state', 'frames')
assert [[{k: x[k] for k in blk_keys} for x in s['blocks']] for s in orig['segments']] == \
       [[{k: x[k] for k in blk_keys} for x in s['blocks']] for s in ours['segments']]
assert orig['external_annotations'] == ours['external_annotations']
assert ours['allocator_settings']['expandable_segments'] is False
# memory_viz passes each APPENDS batch as the arguments of one JavaScript call: keep them
# to Python's own batch size.
batches = []
class Counting(pickle._Unpickler):
    dispatch = dict(pickle._Unpickler.dispatch)
    def load_appends(self):
        batches.append(len(self.stack))
        pickle._Unpickler.load_appends(self)
    dispatch[pickle.APPENDS[0]] = load_appends
import io
Counting(io.BytesIO(raw)).load()
assert max(batches) == 1000, max(batches)
print('ok', len(b))
)";
  const std::string cmd =
      absl::StrCat("python3 ", script, " ", Data("leaky_mlp.pickle.xz"), " ", out, " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) output += buf;
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(output, absl::StrCat("ok ", original->events.size(), "\n"));
}

}  // namespace
}  // namespace gpumem::trace
