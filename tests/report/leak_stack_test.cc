// What a leak suspect is made of: the stack of what leaked, and the device memory it
// took rather than the bytes asked for.
#include "gtest/gtest.h"
#include "tests/report/event_list.h"
#include "tools/report/report.h"
#include "tools/trace/frame_table.h"

namespace gpumem::report {
namespace {

using test_trace::Events;

// One site mixes blocks that are freed every step (first seen) with blocks that are kept
// (a backward op's gradients, attributed to the forward line): the suspect's stack must be
// the kept blocks'.
TEST(LeakStack, IsTheStackOfTheBlocksNeverFreed) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  const std::uint32_t lib = frames.Intern({"site-packages/torch/nn/modules/linear.py", 125, "forward"});
  const std::uint32_t line = frames.Intern({"train.py", 8, "<module>"});
  const std::uint32_t node = frames.Intern({"<autograd>", 0, "AddmmBackward0 (backward)"});
  const std::uint32_t freed = frames.InternStack({lib, line});
  const std::uint32_t kept = frames.InternStack({node, lib, line});
  std::uint64_t addr = 1 << 20;
  Events events(&t);
  for (int step = 0; step < 12; ++step) {
    const std::uint64_t out = addr += 8 << 20;
    events.Push(trace::Action::kAlloc, out, 4 << 20, freed);
    events.Push(trace::Action::kAlloc, addr += 8 << 20, 4 << 20, kept);
    events.Free(out, 4 << 20, freed);
    events.Step();
  }
  // The process exits: everything is freed after the last step end, as in a real trace.
  const std::vector<trace::Event> before_exit = t.events;
  for (const trace::Event& e : before_exit) {
    if (e.action == trace::Action::kAlloc && e.stack_id == kept) events.Free(e.addr, 4 << 20, kept);
  }
  Report r = BuildReport(t, ReportOptions{});
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  const LeakSuspect& s = r.leaks.suspects[0];
  EXPECT_EQ(s.name, "train.py:8 <module>");
  EXPECT_EQ(s.stack, kept);
  EXPECT_EQ(r.sites.example_stack(s.site), freed);  // what the fallback would have shown
  EXPECT_EQ(s.kept_through, "");  // the kept and the freed blocks came by the same calls
}

// A model written as a plain function: the training pass calls it (through autograd's
// grad, its outputs freed) and the loop calls it again for a list it keeps. Both allocate
// at the function's line, so the site is that line; the suspect also names the loop's
// call, the line to change.
TEST(LeakStack, NamesTheCallThatKeptBlocksCameThroughWhereTheSiteAlsoFrees) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  const std::uint32_t matmul = frames.Intern({"site-packages/torch/_tensor.py", 40, "__matmul__"});
  const std::uint32_t forward = frames.Intern({"train.py", 3, "forward"});
  const std::uint32_t loss = frames.Intern({"train.py", 6, "loss"});
  const std::uint32_t grad = frames.Intern({"site-packages/torch/_functorch/apis.py", 433, "wrapper"});
  const std::uint32_t train = frames.Intern({"train.py", 12, "<module>"});
  const std::uint32_t keep = frames.Intern({"train.py", 15, "<module>"});
  const std::uint32_t freed = frames.InternStack({matmul, forward, loss, grad, train});
  const std::uint32_t kept = frames.InternStack({matmul, forward, keep});
  std::uint64_t addr = 1 << 20;
  Events events(&t);
  for (int step = 0; step < 12; ++step) {
    const std::uint64_t out = addr += 8 << 20;
    events.Push(trace::Action::kAlloc, out, 8 << 20, freed);
    events.Free(out, 8 << 20, freed);
    events.Push(trace::Action::kAlloc, addr += 8 << 20, 8 << 20, kept);
    events.Step();
  }
  Report r = BuildReport(t, ReportOptions{});
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  const LeakSuspect& s = r.leaks.suspects[0];
  EXPECT_EQ(s.name, "train.py:3 forward");
  EXPECT_EQ(s.kept_through, "train.py:15 <module>");
  EXPECT_EQ(SuspectText(s), "train.py:3 forward, called from train.py:15 <module>");
}

// A training loop in `train`, called from the script's top level, that takes each batch
// (allocated at one line of the loop) and runs a step through a helper (another line).
// `keep_every`: the loop keeps the helper's output every so many steps (1: every one).
trace::Trace HelperLoop(int keep_every) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  const std::uint32_t linear = frames.Intern({"site-packages/torch/nn/modules/linear.py", 125, "forward"});
  const std::uint32_t step = frames.Intern({"train.py", 42, "train_step"});
  const std::uint32_t take_batch = frames.Intern({"train.py", 59, "train"});
  const std::uint32_t call_step = frames.Intern({"train.py", 60, "train"});
  const std::uint32_t main = frames.Intern({"train.py", 80, "<module>"});
  const std::uint32_t batch = frames.InternStack({linear, take_batch, main});
  const std::uint32_t out = frames.InternStack({linear, step, call_step, main});
  std::uint64_t addr = 1 << 20;
  Events events(&t);
  for (int i = 0; i < 24; ++i) {
    const std::uint64_t x = addr += 8 << 20, y = addr += 8 << 20;
    events.Push(trace::Action::kAlloc, x, 4 << 20, batch);
    events.Push(trace::Action::kAlloc, y, 8 << 20, out);
    if (i % keep_every != 0) events.Free(y, 8 << 20, out);
    events.Free(x, 4 << 20, batch);
    events.Step();
  }
  return t;
}

// The helper returns its output and the loop keeps every one: every block of the site
// came the same way, so nothing tells the kept ones apart, but the loop went on to take
// the next batch while they stayed: the suspect names the helper's caller, where they
// are kept, beside the line that allocated them.
TEST(LeakStack, NamesTheHelpersCallerWhereItsOutputOutlivesItsCall) {
  const trace::Trace t = HelperLoop(1);
  Report r = BuildReport(t, ReportOptions{});
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  EXPECT_EQ(SuspectText(r.leaks.suspects[0]), "train.py:42 train_step, called from train.py:60 train");
}

// Two tasks trained in turns through the same helper and the same line of the loop, one
// task's outputs kept: the kept blocks' stack also frees (the other task's), and the
// caller is named all the same.
TEST(LeakStack, NamesTheCallerWhereTheKeptStackAlsoFrees) {
  const trace::Trace t = HelperLoop(2);
  Report r = BuildReport(t, ReportOptions{});
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  EXPECT_EQ(r.leaks.suspects[0].kept_through, "train.py:60 train");
}

// The loop in its own function keeps its outputs: it never returns while they stay (its
// other lines run, but within the same call), so its caller tells nothing and is not
// named; nor are blocks allocated before the loop (the model, built at another line of
// the caller) taken for a return.
TEST(LeakStack, TheLoopsOwnFunctionIsNamedAlone) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  const std::uint32_t linear = frames.Intern({"site-packages/torch/nn/modules/linear.py", 125, "forward"});
  const std::uint32_t build = frames.Intern({"train.py", 12, "build"});
  const std::uint32_t loop_out = frames.Intern({"train.py", 50, "train"});
  const std::uint32_t loop_loss = frames.Intern({"train.py", 51, "train"});
  const std::uint32_t call_build = frames.Intern({"train.py", 84, "main"});
  const std::uint32_t call_train = frames.Intern({"train.py", 85, "main"});
  const std::uint32_t top = frames.Intern({"train.py", 90, "<module>"});
  const std::uint32_t params = frames.InternStack({linear, build, call_build, top});
  const std::uint32_t out = frames.InternStack({linear, loop_out, call_train, top});
  const std::uint32_t loss = frames.InternStack({loop_loss, call_train, top});
  std::uint64_t addr = 1 << 20;
  Events events(&t);
  events.Push(trace::Action::kAlloc, addr += 64 << 20, 32 << 20, params);
  for (int i = 0; i < 24; ++i) {
    events.Push(trace::Action::kAlloc, addr += 8 << 20, 8 << 20, out);
    const std::uint64_t l = addr += 8 << 20;
    events.Push(trace::Action::kAlloc, l, 512, loss);
    events.Free(l, 512, loss);
    events.Step();
  }
  Report r = BuildReport(t, ReportOptions{});
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  EXPECT_EQ(SuspectText(r.leaks.suspects[0]), "train.py:50 train");
}

// Each step's loss kept as a tensor: 4 bytes asked for, a 512-byte block taken. Over 3,000
// steps that is 12 KB asked for, far below what is called a leak, and 1.46 MiB of device
// memory, above it. The suspect is judged, and its rate told, by the blocks.
Report ScalarsKeptEachStep(bool kept) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  const std::uint32_t batch = frames.InternStack({frames.Intern({"train.py", 5, "<module>"})});
  const std::uint32_t loss = frames.InternStack({frames.Intern({"train.py", 8, "<module>"})});
  std::uint64_t addr = 1 << 30;
  Events events(&t);
  for (int step = 0; step < 3000; ++step) {
    events.Push(trace::Action::kAlloc, 1 << 20, 64 << 20, batch);
    const std::uint64_t scalar = addr += 512;
    events.Push(trace::Action::kAlloc, scalar, 4, loss);
    events.Push(trace::Action::kFreeCompleted, 1 << 20, 64 << 20, batch);
    if (!kept) events.Push(trace::Action::kFreeCompleted, scalar, 4, loss);
    events.Step();
  }
  return BuildReport(t, ReportOptions{});
}

TEST(LeakSuspectBytes, AScalarKeptEachStepIsALeakOfItsBlocks) {
  const Report r = ScalarsKeptEachStep(true);
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  EXPECT_EQ(r.leaks.suspects[0].name, "train.py:8 <module>");
  EXPECT_NEAR(r.leaks.suspects[0].bytes_per_step, 512, 1);
}

TEST(LeakSuspectBytes, AScalarFreedEachStepIsNot) {
  EXPECT_TRUE(ScalarsKeptEachStep(false).leaks.suspects.empty());
}

}  // namespace
}  // namespace gpumem::report
