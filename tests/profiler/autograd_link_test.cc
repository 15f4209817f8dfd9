// Autograd links (record type 12): a backward allocation, made on a thread with no Python
// frames, reads back under the Python stack of the forward op that created its node, and
// the report's site table groups it with that forward code. Synthetic records: no torch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "profiler/trace_format.h"
#include "profiler/trace_writer.h"
#include "tests/profiler/trace_test_util.h"
#include "tools/report/sites.h"
#include "tools/trace/gpumem_reader.h"

namespace gpumem {
namespace {

using testing::ReadBytes;
using testing::TempPath;

constexpr std::uint32_t kForwardThread = 1;  // PyTorch's id of the forward thread

RawRecord Alloc(std::uint64_t addr, std::uint32_t stack, std::uint32_t kernel_thread) {
  RawRecord r;
  r.type = format::RecordType::kAlloc;
  r.time_ns = TraceWriter::NowNs();
  r.addr = addr;
  r.size = 4096;
  r.thread = kernel_thread;
  r.stack_id = stack;
  return r;
}

RawRecord Forward(RawRecord r, std::uint64_t peeked_seq) {
  r.has_autograd = true;
  r.autograd_seq = peeked_seq;
  r.autograd_thread = kForwardThread;
  return r;
}

RawRecord Backward(RawRecord r, std::uint64_t node_seq, std::uint32_t node_frame) {
  r.has_autograd = true;
  r.autograd_seq = node_seq;
  r.autograd_thread = kForwardThread;
  r.autograd_node_frame = node_frame;
  return r;
}

std::uint32_t PythonStack(StackTable& t, const std::string& function, int line) {
  RawFrame frames[3] = {
      {t.InternNamedFrame(format::FrameKind::kPython, "linear", "/x/site-packages/torch/nn/functional.py", 10), 0,
       RawFrame::kNamedTag},
      {t.InternNamedFrame(format::FrameKind::kPython, function, "model.py", line), 0,
       RawFrame::kNamedTag},
      {t.InternNamedFrame(format::FrameKind::kPython, "train", "train.py", 99), 0,
       RawFrame::kNamedTag}};
  return t.Intern(frames, 3);
}

std::vector<std::string> Functions(const trace::Trace& t, std::uint32_t stack) {
  std::vector<std::string> out;
  for (std::uint32_t f : t.stacks.at(stack)) out.push_back(t.frames[f].function);
  return out;
}

// Records a forward pass on the main thread and a backward pass on the engine thread.
// Forward links (no node frame) ride in their allocation's journal slot, backward ones
// take a slot of their own: both must come back, from the chunks and from the journal.
void RecordForwardAndBackward(TraceWriter& writer, bool flush_between) {
  StackTable& stacks = writer.stacks();
  const std::uint32_t fc1 = PythonStack(stacks, "fc1", 12);
  const std::uint32_t fc2 = PythonStack(stacks, "fc2", 13);
  const std::uint32_t mm = stacks.InternNamedFrame(format::FrameKind::kApi, "MmBackward0",
                                                   "<autograd>", 0);
  const std::uint32_t relu = stacks.InternNamedFrame(format::FrameKind::kApi,
                                                     "ReluBackward0", "<autograd>", 0);
  const std::uint32_t accumulate = stacks.InternNamedFrame(
      format::FrameKind::kApi, "AccumulateGrad", "<autograd>", 0);
  const std::uint32_t seed = PythonStack(stacks, "backward", 90);  // loss.backward()
  writer.Flush();  // the definitions in a chunk: a killed run's journal refers to them
  constexpr std::uint32_t kMain = 100, kEngine = 200;  // kernel thread ids
  // The first op of the run (peek() = 0), the parameters'.
  writer.Record(Forward(Alloc(0x800, fc1, kMain), 0));
  // Forward: node 7 (fc1's mm) is created, then its output allocates with peek() = 8;
  // a second allocation of the same op must not win over the first. Node 9 (fc2).
  writer.Record(Forward(Alloc(0x1000, fc1, kMain), 8));
  writer.Record(Forward(Alloc(0x2000, fc2, kMain), 8));
  writer.Record(Forward(Alloc(0x3000, fc2, kMain), 10));
  writer.Record(Forward(Alloc(0x3800, seed, kMain), 11));  // the gradient seed
  if (flush_between) writer.Flush();  // the backward half in another chunk
  // Backward on the engine thread: no Python frames of its own.
  writer.Record(Backward(Alloc(0x4000, 0, kEngine), 9, mm));
  writer.Record(Backward(Alloc(0x5000, 0, kEngine), 7, mm));
  // A node whose forward op left no allocation in the trace (seq 40, none near), and a
  // parameter's gradient, made by a node no forward op made (numbered 2^64-1).
  writer.Record(Backward(Alloc(0x6000, 0, kEngine), 40, relu));
  writer.Record(Backward(Alloc(0x6800, 0, kEngine), format::kNoAutogradSequence, accumulate));
  // An event without a link stays as it was.
  writer.Record(Alloc(0x7000, 0, kEngine));
}

void ExpectForwardAndBackwardStacks(const trace::Trace& t) {
  ASSERT_EQ(t.events.size(), 10u);
  auto by_addr = [&](std::uint64_t addr) -> const trace::Event& {
    for (const trace::Event& e : t.events) {
      if (e.addr == addr) return e;
    }
    ADD_FAILURE() << "no event at " << addr;
    return t.events.front();
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(Functions(t, by_addr(0x1000).stack_id), (V{"linear", "fc1", "train"}));
  EXPECT_EQ(Functions(t, by_addr(0x4000).stack_id),
            (V{"MmBackward0 (backward)", "linear", "fc2", "train"}));
  EXPECT_EQ(Functions(t, by_addr(0x5000).stack_id),
            (V{"MmBackward0 (backward)", "linear", "fc1", "train"}));
  // Without a forward op: the pass's caller, from the seed, not the run's first op.
  const V from_caller = {"ReluBackward0 (backward)", "autograd's thread", "linear", "backward",
                         "train"};
  EXPECT_EQ(Functions(t, by_addr(0x6000).stack_id), from_caller);
  EXPECT_EQ(Functions(t, by_addr(0x6800).stack_id),
            (V{"AccumulateGrad (backward)", "autograd's thread", "linear", "backward", "train"}));
  EXPECT_EQ(by_addr(0x7000).stack_id, 0u);

  // The report's sites: backward of fc1 lands on fc1's line, a gradient on the line
  // that ran the backward pass.
  report::SiteTable sites(t);
  EXPECT_EQ(sites.site_of_stack(by_addr(0x5000).stack_id),
            sites.site_of_stack(by_addr(0x1000).stack_id));
  EXPECT_EQ(sites.name(sites.site_of_stack(by_addr(0x5000).stack_id)), "model.py:12 fc1");
  EXPECT_EQ(sites.name(sites.site_of_stack(by_addr(0x6800).stack_id)), "model.py:90 backward");
}

TEST(AutogradLinkTest, BackwardAllocationsReadBackUnderTheirForwardCode) {
  TraceWriterOptions options;
  options.path = TempPath("autograd.gpumem");
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  RecordForwardAndBackward(**writer, /*flush_between=*/true);  // links cross chunks
  ASSERT_TRUE((*writer)->Close().ok());
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path, nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->warnings.empty()) << t->warnings.front();
  ExpectForwardAndBackwardStacks(*t);
  std::remove(options.path.c_str());
}

// The same run read while its writer has compressed nothing, as after a kill: every link
// comes from the journal's slots.
TEST(AutogradLinkTest, LinksReadBackFromTheJournal) {
  TraceWriterOptions options;
  options.path = TempPath("autograd_journal.gpumem");
  options.flush_interval_ms = 3600000;
  auto writer = TraceWriter::Open(options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  RecordForwardAndBackward(**writer, /*flush_between=*/false);
  EXPECT_EQ((*writer)->recorded(), 10u);  // link slots are not events
  trace::GpumemFileInfo info;
  auto t = trace::ParseGpumemTrace(ReadBytes(options.path), options.path, &info);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(info.journal_events, 10u);
  ASSERT_EQ(t->warnings.size(), 1u);  // only that the recording did not finish
  EXPECT_NE(t->warnings[0].find("10 from the raw journal"), std::string::npos) << t->warnings[0];
  ExpectForwardAndBackwardStacks(*t);
  ASSERT_TRUE((*writer)->Close().ok());
  std::remove(options.path.c_str());
}

// A link record must be followed by the event it describes; one at the end of a chunk is
// a malformed record (the chunk's earlier events are kept, with a warning).
TEST(AutogradLinkTest, ALinkWithoutItsEventIsReportedNotFollowed) {
  std::string records;
  records.push_back(static_cast<char>(format::RecordType::kAlloc));
  format::PutVarint(&records, 5);      // time delta
  format::PutVarint(&records, 1);      // thread
  format::PutVarint(&records, 0);      // device (zigzag)
  format::PutVarint(&records, 0);      // stream
  format::PutVarint(&records, 0x10);   // addr delta (zigzag)
  format::PutVarint(&records, 64);     // size
  format::PutVarint(&records, 0);      // stack
  records.push_back(static_cast<char>(format::RecordType::kAutograd));
  format::PutVarint(&records, 3);
  format::PutVarint(&records, 1);
  format::PutVarint(&records, 0);
  std::string file = format::FilePrefix();
  format::AppendChunk(&file, format::ChunkKind::kRecords, 0, records);
  auto t = trace::ParseGpumemTrace(file, "t.gpumem", nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 1u);
  bool malformed = false;
  for (const std::string& w : t->warnings) malformed |= w.find("malformed record") != std::string::npos;
  EXPECT_TRUE(malformed);
}

}  // namespace
}  // namespace gpumem
