#include "tools/report/steps.h"

#include "gtest/gtest.h"
#include "profiler/package_notes.h"
#include "tools/trace/frame_table.h"

namespace gpumem::report {
namespace {

using trace::Action;

TEST(ParseStepSite, AcceptsFileLineOnly) {
  ASSERT_TRUE(ParseStepSite("train.py:42").ok());
  EXPECT_EQ(ParseStepSite("a/b/train.py:42")->file, "a/b/train.py");
  EXPECT_FALSE(ParseStepSite("train.py").ok());
  EXPECT_FALSE(ParseStepSite("train.py:x").ok());
  EXPECT_FALSE(ParseStepSite(":3").ok());
}

// Annotations: the END of each Optimizer.step closes a step at the next event.
TEST(FindSteps, FromOptimizerAnnotations) {
  trace::Trace t;
  for (int i = 0; i < 10; ++i) {
    trace::Event e;
    e.time_us = i * 10;
    t.events.push_back(e);
  }
  t.annotations.push_back({"Optimizer.step#SGD.step", true, 20, 0});
  t.annotations.push_back({"Optimizer.step#SGD.step", false, 25, 0});
  t.annotations.push_back({"Optimizer.step#SGD.step", true, 60, 0});
  t.annotations.push_back({"Optimizer.step#SGD.step", false, 65, 0});
  Steps s = FindSteps(t, std::nullopt);
  EXPECT_EQ(s.method, StepMethod::kAnnotations);
  EXPECT_EQ(s.count, 2u);
  EXPECT_EQ(s.ends, (std::vector<std::size_t>{3, 7}));
  EXPECT_EQ(s.StepOf(2), 0u);
  EXPECT_EQ(s.StepOf(3), 1u);
  EXPECT_EQ(s.StepOf(9), 2u);
}

// Step marks say what made them; several sources are named in the order they rank, each
// with its count (a loop with accumulated micro-batches before its first optimizer step).
TEST(FindSteps, NamesWhatMarkedThem) {
  trace::Trace t;
  auto mark = [&t](trace::StepSource source) {
    trace::Event e;
    e.action = Action::kStep;
    e.step_source = source;
    t.events.push_back(e);
  };
  for (int i = 0; i < 3; ++i) mark(trace::StepSource::kModelCall);
  EXPECT_EQ(FindSteps(t, std::nullopt).source, "model calls");
  mark(trace::StepSource::kBackward);
  mark(trace::StepSource::kOptimizerHook);
  mark(trace::StepSource::kOptimizerHook);
  const Steps s = FindSteps(t, std::nullopt);
  EXPECT_EQ(s.method, StepMethod::kStepEvents);
  EXPECT_EQ(s.count, 6u);
  EXPECT_EQ(s.source, "optimizer step hooks (2), backward passes (1) and model calls (3)");
  mark(trace::StepSource::kGraphReplay);  // a whole step captured, then replayed
  EXPECT_EQ(FindSteps(t, std::nullopt).source,
            "optimizer step hooks (2), backward passes (1), model calls (3) and graph "
            "replays (1)");
}

// Setup, then seven repeats of the same stacks (stack 1 three times each).
trace::Trace SevenRepeats() {
  trace::Trace t;
  trace::FrameTable frames(&t);
  std::vector<std::uint32_t> stacks;
  for (int line = 1; line <= 5; ++line) {
    stacks.push_back(frames.InternStack({frames.Intern({"train.py", line, "step"})}));
  }
  auto alloc = [&](std::uint32_t stack, std::uint64_t addr) {
    trace::Event e;
    e.action = Action::kAlloc;
    e.stack_id = stack;
    e.addr = addr;
    e.size = 512;
    t.events.push_back(e);
    e.action = Action::kFreeCompleted;
    t.events.push_back(e);
  };
  alloc(stacks[4], 1);  // setup, once
  for (int step = 0; step < 7; ++step) {
    alloc(stacks[0], 10);
    // Inner loop: stack 1 three times a step, so it is not the anchor.
    for (int k = 0; k < 3; ++k) alloc(stacks[1], 20 + k);
    alloc(stacks[2], 30);
    alloc(stacks[3], 40);
  }
  return t;
}

// No markers: a loop of the same stacks is found, with its period.
TEST(FindSteps, InfersTheRepeatingPattern) {
  Steps s = FindSteps(SevenRepeats(), std::nullopt);
  EXPECT_EQ(s.method, StepMethod::kInferred);
  EXPECT_EQ(s.count, 7u);
  EXPECT_EQ(s.ends.size(), 6u);
  EXPECT_EQ(s.ends[0], 2u + 12u);  // step 2 starts after setup (2 events) and one step (12)
}

// The package said it would mark the steps (a model on the GPU was called) and none
// ended: the repeats are a model's layers, and no step is inferred from them.
TEST(FindSteps, NoneInferredWhereThePackageWasToMarkThem) {
  trace::Trace t = SevenRepeats();
  t.annotations.push_back({std::string(format::kStepsComingNote), true, 0, -1});
  EXPECT_EQ(FindSteps(t, std::nullopt).method, StepMethod::kNone);
}

// PyTorch keeps every annotation but only a long run's last events: steps that ended
// before the first event recorded are left out, and counted in the detail.
TEST(FindSteps, AnnotationsBeforeTheRecordingAreNotItsSteps) {
  trace::Trace t;
  for (int i = 0; i < 10; ++i) {
    trace::Event e;
    e.time_us = 1000 + i * 10;
    t.events.push_back(e);
  }
  for (std::int64_t end : {100, 200, 300, 1025, 1065}) {
    t.annotations.push_back({"Optimizer.step#SGD.step", true, end - 1, 0});
    t.annotations.push_back({"Optimizer.step#SGD.step", false, end, 0});
  }
  const Steps s = FindSteps(t, std::nullopt);
  EXPECT_EQ(s.method, StepMethod::kAnnotations);
  EXPECT_EQ(s.ends, (std::vector<std::size_t>{3, 7}));
  EXPECT_EQ(s.count, 2u);
  EXPECT_EQ(s.detail,
            "Optimizer.step; 3 more ended before the recording began, steps here count from "
            "there");
}

// Seven marked-free repeats, then fourteen more after two optimizer steps marked at the
// first two events; in the rest, each repeat keeps its first block where `keeps`.
trace::Trace MarkedThenUnmarkedRest(bool keeps) {
  trace::Trace t = SevenRepeats();
  for (std::size_t i = 0; i < t.events.size(); ++i) t.events[i].time_us = 1000 + i;
  const trace::Trace rest = SevenRepeats();
  for (int twice = 0; twice < 2; ++twice) {
    for (std::size_t i = 2; i < rest.events.size(); ++i) {
      const trace::Event& e = rest.events[i];
      if (keeps && e.action == Action::kFreeCompleted && e.addr == 10) continue;
      t.events.push_back(e);
      t.events.back().time_us = 1000 + static_cast<std::int64_t>(t.events.size());
    }
  }
  t.annotations.push_back({"Optimizer.step#SGD.step", false, 1000, 0});
  t.annotations.push_back({"Optimizer.step#SGD.step", false, 1001, 0});
  return t;
}

// Training marked by the optimizer, then generation for the rest of the run with no
// optimizer step, keeping something: each repeat of the rest is a step after the last
// marked one.
TEST(FindSteps, TheUnmarkedRestOfAMarkedRunRepeatsAsSteps) {
  const Steps s = FindSteps(MarkedThenUnmarkedRest(/*keeps=*/true), std::nullopt);
  EXPECT_EQ(s.method, StepMethod::kAnnotations);
  EXPECT_EQ(s.count, 2u + 21u);  // the marked two, then the rest's 7 + 14 repeats
  EXPECT_EQ(s.ends.size(), 2u + 20u);
  EXPECT_EQ(s.ends[2], 2u + 12u);
  EXPECT_EQ(s.detail,
            "Optimizer.step; after step 2 none is marked: each step starts at an allocation "
            "from train.py:1 step");
}

// A rest that frees all it allocates (a last pass that gathered its outputs and reduced
// them) keeps nothing: no steps are made of it.
TEST(FindSteps, AnUnmarkedRestThatGivesAllBackAddsNoSteps) {
  const Steps s = FindSteps(MarkedThenUnmarkedRest(/*keeps=*/false), std::nullopt);
  EXPECT_EQ(s.count, 2u);
  EXPECT_EQ(s.detail, "Optimizer.step");
}

// A rest of fewer repeats is the last step's own stretch (a forward's layers, the loop's
// end), not steps of its own.
TEST(FindSteps, AShortUnmarkedRestAddsNoSteps) {
  trace::Trace t = SevenRepeats();
  for (std::size_t i = 0; i < t.events.size(); ++i) t.events[i].time_us = 1000 + i;
  t.annotations.push_back({"Optimizer.step#SGD.step", false, 1000, 0});
  const Steps s = FindSteps(t, std::nullopt);
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.detail, "Optimizer.step");
}

TEST(FindSteps, NoneInRandomNoise) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  std::uint32_t seed = 12345;
  for (int i = 0; i < 400; ++i) {
    seed = seed * 1103515245 + 12345;
    trace::Event e;
    e.action = Action::kAlloc;
    e.stack_id = frames.InternStack({frames.Intern({"train.py", static_cast<int>(seed >> 16) % 50, "f"})});
    e.addr = static_cast<std::uint64_t>(i);
    t.events.push_back(e);
  }
  EXPECT_EQ(FindSteps(t, std::nullopt).method, StepMethod::kNone);
}

}  // namespace
}  // namespace gpumem::report
