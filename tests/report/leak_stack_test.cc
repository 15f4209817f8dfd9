// What a leak suspect is made of: the stack of what leaked, and the device memory it
// took rather than the bytes asked for.
#include "gtest/gtest.h"
#include "tools/report/report.h"
#include "tools/trace/frame_table.h"

namespace gpumem::report {
namespace {

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
  std::int64_t time = 0;
  auto push = [&](trace::Action a, std::uint64_t at, std::uint32_t stack) {
    trace::Event e;
    e.action = a;
    e.addr = at;
    e.size = 4 << 20;
    e.stack_id = stack;
    e.time_us = ++time;
    t.events.push_back(e);
  };
  for (int step = 0; step < 12; ++step) {
    const std::uint64_t out = addr += 8 << 20;
    push(trace::Action::kAlloc, out, freed);
    push(trace::Action::kAlloc, addr += 8 << 20, kept);
    push(trace::Action::kFreeRequested, out, freed);
    push(trace::Action::kFreeCompleted, out, freed);
    trace::Event marker;
    marker.action = trace::Action::kStep;
    marker.time_us = ++time;
    t.events.push_back(marker);
  }
  // The process exits: everything is freed after the last step end, as in a real trace.
  const std::vector<trace::Event> before_exit = t.events;
  for (const trace::Event& e : before_exit) {
    if (e.action == trace::Action::kAlloc && e.stack_id == kept) {
      push(trace::Action::kFreeRequested, e.addr, kept);
      push(trace::Action::kFreeCompleted, e.addr, kept);
    }
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
  std::int64_t time = 0;
  auto push = [&](trace::Action a, std::uint64_t at, std::uint32_t stack) {
    trace::Event e;
    e.action = a;
    e.addr = at;
    e.size = 8 << 20;
    e.stack_id = stack;
    e.time_us = ++time;
    t.events.push_back(e);
  };
  for (int step = 0; step < 12; ++step) {
    const std::uint64_t out = addr += 8 << 20;
    push(trace::Action::kAlloc, out, freed);
    push(trace::Action::kFreeRequested, out, freed);
    push(trace::Action::kFreeCompleted, out, freed);
    push(trace::Action::kAlloc, addr += 8 << 20, kept);
    trace::Event marker;
    marker.action = trace::Action::kStep;
    marker.time_us = ++time;
    t.events.push_back(marker);
  }
  Report r = BuildReport(t, ReportOptions{});
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  const LeakSuspect& s = r.leaks.suspects[0];
  EXPECT_EQ(s.name, "train.py:3 forward");
  EXPECT_EQ(s.kept_through, "train.py:15 <module>");
  EXPECT_EQ(SuspectText(s), "train.py:3 forward, called from train.py:15 <module>");
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
  std::int64_t time = 0;
  auto push = [&](trace::Action a, std::uint64_t at, std::uint64_t size, std::uint32_t stack) {
    trace::Event e;
    e.action = a;
    e.addr = at;
    e.size = size;
    e.stack_id = stack;
    e.time_us = ++time;
    t.events.push_back(e);
  };
  for (int step = 0; step < 3000; ++step) {
    push(trace::Action::kAlloc, 1 << 20, 64 << 20, batch);
    const std::uint64_t scalar = addr += 512;
    push(trace::Action::kAlloc, scalar, 4, loss);
    push(trace::Action::kFreeCompleted, 1 << 20, 64 << 20, batch);
    if (!kept) push(trace::Action::kFreeCompleted, scalar, 4, loss);
    push(trace::Action::kStep, 0, 0, 0);
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
