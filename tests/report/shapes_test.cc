// The shapes unchanged training scripts run out of memory in (synthetic_shapes.h) get the
// right diagnosis: steps, class, site, capacity, and which OOM ended the run.
#include "gtest/gtest.h"
#include "tools/report/json_report.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/report/synthetic_shapes.h"
#include "tools/report/terminal_report.h"

namespace gpumem::report {
namespace {

using synthetic::kCapacity;
using synthetic::kMiB;

std::size_t Count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string StackText(const Report& r, std::uint32_t stack) {
  std::string out;
  for (const std::string& f : StackNames(*r.trace, stack)) out += f + "\n";
  return out;
}

TEST(Shapes, ModelThatDoesNotFitIsAPeakNotALeak) {
  trace::Trace t = synthetic::NoFitTrace();
  Report r = BuildReport(t, {});
  // The layers of the one forward repeat, but hold no backward: not steps.
  EXPECT_EQ(r.steps.method, StepMethod::kNone) << r.steps.detail;
  EXPECT_TRUE(r.leaks.suspects.empty());
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kPeak) << r.ooms[0].evidence;
  EXPECT_TRUE(r.ooms[0].fatal);
  EXPECT_EQ(r.fatal_oom, 0u);
  EXPECT_NE(Verdict(r).find("genuine peak"), std::string::npos) << Verdict(r);
}

TEST(Shapes, ValidationLossKeptAsTensorIsALeakAtValidate) {
  trace::Trace t = synthetic::ValidationLeakTrace();
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.method, StepMethod::kStepEvents);
  EXPECT_EQ(r.steps.source, "optimizer step hooks");
  EXPECT_EQ(r.steps.count, 85u);
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].at.step + 1, 86u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
  ASSERT_FALSE(r.leaks.suspects.empty());
  const LeakSuspect& top = r.leaks.suspects[0];
  EXPECT_EQ(top.name, "model.py:40 Net.forward");
  EXPECT_NEAR(top.bytes_per_step, static_cast<double>(synthetic::kValidationLeakPerStep), 1.0);
  // The stack shown is the one that holds the growth: the forward called from validate.
  EXPECT_NE(StackText(r, top.stack).find("train.py:77 validate"), std::string::npos)
      << StackText(r, top.stack);
}

TEST(Shapes, ValidationLeakIsFoundByInferenceWithoutMarks) {
  trace::Trace t = synthetic::ValidationLeakTrace(/*marks=*/false);
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.method, StepMethod::kInferred);
  EXPECT_NEAR(static_cast<double>(r.steps.count), 86.0, 1.0);
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
}

TEST(Shapes, LeakThatBeginsLateIsNamed) {
  trace::Trace t = synthetic::LateLeakTrace();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_GT(r.ooms[0].at.step, static_cast<std::size_t>(synthetic::kLateLeakStart));
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  const LeakSuspect& top = r.leaks.suspects[0];
  EXPECT_EQ(top.name, "model.py:40 Net.forward");
  EXPECT_NE(StackText(r, top.stack).find("train.py:90 evaluate"), std::string::npos);
  EXPECT_NEAR(top.bytes_per_step, static_cast<double>(synthetic::kLateLeakPerStep),
              0.05 * synthetic::kLateLeakPerStep);
}

TEST(Shapes, BatchLongerEveryStepIsAPeakNotALeak) {
  trace::Trace t = synthetic::GrowingBatchTrace();
  Report r = BuildReport(t, {});
  EXPECT_GT(r.steps.count, 100u);
  EXPECT_TRUE(r.leaks.suspects.empty()) << r.leaks.suspects[0].name;
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kPeak) << r.ooms[0].evidence;
  EXPECT_NE(Verdict(r).find("genuine peak"), std::string::npos) << Verdict(r);
}

// The trace's one OOM is a leak, and its one suspect is `site` at `per_step` (within 5%).
void ExpectOneLeak(const trace::Trace& t, const std::string& site, double per_step) {
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  EXPECT_EQ(r.leaks.suspects[0].name, site);
  EXPECT_NEAR(r.leaks.suspects[0].bytes_per_step, per_step, 0.05 * per_step);
}

TEST(Shapes, LeakEveryTenthStepIsALeak) {
  ExpectOneLeak(synthetic::StairLeakTrace(), "train.py:70 train",
                static_cast<double>(synthetic::kStairLeakBytes) / synthetic::kStairLeakPeriod);
}

TEST(Shapes, HistoryGrownByConcatenationIsALeak) {
  ExpectOneLeak(synthetic::ConcatenatedHistoryTrace(), "train.py:75 log",
                static_cast<double>(synthetic::kConcatGrowthPerStep));
}

TEST(Shapes, CappedRunUsesTheRecordedCap) {
  trace::Trace t = synthetic::CappedPeakTrace();
  Report r = BuildReport(t, {});
  ASSERT_TRUE(r.capacity.has_value());
  EXPECT_EQ(*r.capacity, 512 * kMiB);
  EXPECT_EQ(r.capacity_source, "trace: set_per_process_memory_fraction");
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].capacity, 512 * kMiB);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kPeak) << r.ooms[0].evidence;
  EXPECT_NE(r.ooms[0].evidence.find("512.00 MiB"), std::string::npos) << r.ooms[0].evidence;
  // An explicit --capacity still wins.
  ReportOptions given;
  given.capacity = kCapacity;
  Report g = BuildReport(t, given);
  EXPECT_EQ(*g.capacity, kCapacity);
  EXPECT_EQ(g.ooms[0].capacity_source, "--capacity");
}

TEST(Shapes, RecordedCapProjectsTheOomStepWithoutCapacityFlag) {
  trace::Trace t = synthetic::ValidationLeakTrace();
  t.device_capacity.reset();
  t.capacity_changes.push_back({0, 0, kCapacity, trace::CapacitySource::kDeviceTotal});
  Report r = BuildReport(t, {});
  ASSERT_TRUE(r.projected_oom_step.has_value());
  EXPECT_NEAR(static_cast<double>(*r.projected_oom_step + 1), 86.0, 2.0);
  EXPECT_EQ(r.capacity_source, "trace: device total");
}

TEST(Shapes, CaughtCudnnOomsAreRecoveredNotTheVerdict) {
  trace::Trace t = synthetic::RecoveredOomsTrace();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 84u);
  EXPECT_EQ(r.recovered_ooms, 84u);
  EXPECT_FALSE(r.fatal_oom.has_value());
  const std::string verdict = Verdict(r);
  EXPECT_NE(verdict.find("did not die of an OOM it saw"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("84 OOMs caught and recovered from"), std::string::npos) << verdict;
  const std::string text = FormatTerminal(r, false);
  EXPECT_EQ(Count(text, "Fix:"), 0u) << text;
  EXPECT_EQ(Count(text, "torch.cuda.empty_cache() after catching"), 1u) << text;
  // What they left: the 896 MiB cache with only the parameters in it at a step end.
  EXPECT_EQ(r.ooms.back().at.reserved_after, 896 * kMiB);
  EXPECT_EQ(r.ooms.back().at.allocated_after, 128 * kMiB);
  EXPECT_TRUE(r.ooms.back().at.after_is_step_end);
  nlohmann::json j = ReportToJson(r);
  EXPECT_TRUE(j["fatal_oom"].is_null());
  EXPECT_EQ(j["recovered_ooms"], 84u);
}

TEST(Shapes, TheOomThatEndedTheRunIsTheVerdictAndEachFixShowsOnce) {
  trace::Trace t = synthetic::RecoveredOomsTrace(/*fatal_end=*/true);
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 85u);
  ASSERT_EQ(r.fatal_oom, 84u);
  EXPECT_EQ(r.ooms[84].at.request, 2048 * kMiB);
  const std::string verdict = Verdict(r);
  EXPECT_NE(verdict.find("out of memory in step 21: a genuine peak"), std::string::npos) << verdict;
  const std::string text = FormatTerminal(r, false);
  EXPECT_EQ(Count(text, "Fix:"), 1u) << text;
  EXPECT_EQ(Count(text, "OOM that ended the run"), 1u) << text;
}

TEST(Shapes, NoLeakVerdictBeforeThreeFinishedSteps) {
  // The leak trace cut to its first steps, then an OOM: too little to call growth a leak.
  trace::Trace t = synthetic::LeakTrace();
  std::size_t steps = 0, cut = 0;
  for (; cut < t.events.size() && steps < 2; ++cut) steps += t.events[cut].action == trace::Action::kStep;
  t.events.resize(cut);
  trace::Event oom;
  oom.action = trace::Action::kOom;
  oom.size = 900 * kMiB;
  oom.time_us = t.events.back().time_us + 10;
  t.events.push_back(oom);
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_NE(r.ooms[0].cls, OomClass::kLeak);
  EXPECT_NE(r.ooms[0].evidence.find("too few to call growth a leak"), std::string::npos)
      << r.ooms[0].evidence;
}

}  // namespace
}  // namespace gpumem::report
