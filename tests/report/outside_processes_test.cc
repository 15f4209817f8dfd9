// NVML's figures of a device's processes in the outside-allocator section: read at the
// moment, they split what the driver counts beyond the allocator and the libraries into
// this process's CUDA context (and unseen calls), other processes, and what neither names;
// read earlier, or not at all, the section keeps its one remainder.
#include <string>

#include "gtest/gtest.h"
#include "profiler/process_note.h"
#include "tools/report/json_report.h"
#include "tools/report/outside_format.h"
#include "tools/report/report.h"
#include "tools/report/synthetic_builder.h"
#include "tools/report/synthetic_outside.h"
#include "tools/report/terminal_report.h"

namespace gpumem::report {
namespace {

using A = synthetic::OutsideAnswer;

constexpr std::uint64_t kOthers = 400 * A::kMiB;  // another process's context on the device
constexpr std::uint64_t kOwnContext = A::kContext - kOthers;

// The time of the n-th step end (1-based), or of the OOM (n = 0).
std::int64_t TimeOf(const trace::Trace& t, std::uint64_t n) {
  std::uint64_t steps = 0;
  for (const trace::Event& e : t.events) {
    if (n == 0 && e.action == trace::Action::kOom) return e.time_us;
    if (n != 0 && e.action == trace::Action::kStep && ++steps == n) return e.time_us;
  }
  ADD_FAILURE() << "no such event";
  return 0;
}

// A note as the recorder writes it after step `step` (or at the OOM): by default this
// process holds what the driver counted less the other process's 400 MiB.
struct Note {
  std::uint64_t step = 0;
  std::uint64_t driver_used = 0;
  std::optional<std::uint64_t> self;  // default: driver_used - kOthers
  bool unlisted = false;              // NVML does not list this process (self=?)
  std::int32_t device = 0;
  bool at_oom = false;
};

Note At(std::uint64_t step, std::uint64_t driver_used) {
  Note n;
  n.step = step;
  n.driver_used = driver_used;
  return n;
}

void AddNote(trace::Trace* t, const Note& n) {
  format::ProcessNote note;
  note.step = n.step;
  if (!n.unlisted) note.processes.self = n.self.value_or(n.driver_used - kOthers);
  note.processes.others = {{4242, kOthers}};
  trace::Annotation a;
  a.name = format::ProcessNoteText(note);
  a.time_us = TimeOf(*t, n.at_oom ? 0 : n.step) + 1;
  a.device = n.device;
  t->annotations.push_back(a);
}

constexpr std::uint64_t kPeakUsed = A::UsedAtEnd() + A::kNcclPeakExtra;

TEST(OutsideProcesses, ReadAtThePeakSplitsTheRemainder) {
  trace::Trace t = synthetic::OutsideAllocatorTrace(false);
  AddNote(&t, At(1, kPeakUsed));  // an earlier read is not the peak's
  AddNote(&t, At(A::kPeakStep, kPeakUsed));
  const Report r = BuildReport(t, {});
  ASSERT_TRUE(r.outside.peak && r.outside.peak->processes);
  const OutsideMoment& peak = *r.outside.peak;
  EXPECT_TRUE(peak.processes->at_moment);
  EXPECT_EQ(peak.processes->note.step, A::kPeakStep);
  EXPECT_EQ(peak.context_and_unseen(), kOwnContext);
  EXPECT_EQ(peak.unnamed(), 0);
  EXPECT_EQ(peak.remainder(), A::kContext);  // still the whole rest, for the merged column
  const std::string text = FormatTerminal(r, false);
  EXPECT_NE(text.find("this process " + Bytes(static_cast<double>(kPeakUsed - kOthers)) +
                      " by NVML, of which 200.00 MiB its CUDA context, kernels and calls CUPTI "
                      "did not see; other processes 400.00 MiB (pid 4242 400.00 MiB); named by "
                      "neither 0 B (0.0% of the driver's)"),
            std::string::npos)
      << text;
  const nlohmann::json p = ReportToJson(r)["outside_allocator"]["peak"]["processes"];
  EXPECT_EQ(p["step"], A::kPeakStep);
  EXPECT_EQ(p["at_moment"], true);
  EXPECT_EQ(p["self"], kPeakUsed - kOthers);
  EXPECT_EQ(p["others"][0]["pid"], 4242);
  EXPECT_EQ(p["others_total"], kOthers);
  EXPECT_EQ(p["context_and_unseen"], kOwnContext);
  EXPECT_EQ(p["unnamed"], 0);
}

TEST(OutsideProcesses, NvmlCountingMoreThanTheDriverIsSaid) {
  trace::Trace t = synthetic::OutsideAllocatorTrace(false);
  Note more = At(A::kPeakStep, kPeakUsed);
  more.self = kPeakUsed - kOthers + 8 * A::kMiB;
  AddNote(&t, more);
  const Report r = BuildReport(t, {});
  EXPECT_EQ(r.outside.peak->unnamed(), -static_cast<std::int64_t>(8 * A::kMiB));
  EXPECT_NE(FormatTerminal(r, false).find("NVML counts more by 8.00 MiB"), std::string::npos);
}

TEST(OutsideProcesses, AnEarlierReadOnlyKeepsTheOneRemainder) {
  trace::Trace t = synthetic::OutsideAllocatorTrace(false);
  AddNote(&t, At(1, kPeakUsed));
  const Report r = BuildReport(t, {});
  ASSERT_TRUE(r.outside.peak->processes);
  EXPECT_FALSE(r.outside.peak->processes->at_moment);
  EXPECT_EQ(r.outside.peak->context_and_unseen(), std::nullopt);
  EXPECT_EQ(r.outside.peak->unnamed(), std::nullopt);
  EXPECT_NE(FormatTerminal(r, false).find("600.00 MiB CUDA context and calls CUPTI did not see"),
            std::string::npos);
  EXPECT_EQ(ReportToJson(r)["outside_allocator"]["peak"]["processes"]["at_moment"], false);
}

TEST(OutsideProcesses, ThisProcessUnlistedOrAnotherDeviceSplitsNothing) {
  trace::Trace t = synthetic::OutsideAllocatorTrace(false);
  Note unlisted = At(A::kPeakStep, kPeakUsed);
  unlisted.unlisted = true;
  AddNote(&t, unlisted);
  Note other_device = At(A::kSteps, kPeakUsed);
  other_device.device = 1;
  AddNote(&t, other_device);
  const Report r = BuildReport(t, {});
  EXPECT_EQ(r.outside.peak->context_and_unseen(), std::nullopt);
  ASSERT_TRUE(r.outside.end->processes);  // the earlier one of device 0, not device 1's
  EXPECT_EQ(r.outside.end->processes->note.step, A::kPeakStep);
  EXPECT_FALSE(r.outside.end->processes->at_moment);
  EXPECT_TRUE(ReportToJson(r)["outside_allocator"]["peak"]["processes"]["self"].is_null());
}

TEST(OutsideProcesses, TheOomsReadNamesOtherProcessesInTheVerdict) {
  trace::Trace t = synthetic::OutsideAllocatorTrace(true);
  Note at_oom = At(A::kSteps, A::UsedAtEnd());
  at_oom.at_oom = true;
  AddNote(&t, at_oom);
  const Report r = BuildReport(t, {});
  ASSERT_TRUE(r.outside.end && r.outside.end->processes);
  EXPECT_TRUE(r.outside.end->processes->at_moment);
  EXPECT_EQ(r.outside.end->context_and_unseen(), kOwnContext);
  const std::string verdict = Verdict(r);
  EXPECT_NE(verdict.find("unknown 64.00 MiB, context and unseen 200.00 MiB, other processes "
                         "400.00 MiB of 80.00 GiB"),
            std::string::npos)
      << verdict;
}

// A model too large to load, dying before any step: no step end carried the driver's
// figures and no library called the driver, so only NVML's read at the OOM says what the
// process held beyond the allocator. The verdict and the outside lines say that much.
TEST(OutsideProcesses, AnOomBeforeAnyStepWithOnlyNvmlsReadSaysWhatItSaw) {
  synthetic::Builder b;
  const std::uint64_t base = 0x7f0000000000ull;
  b.Segment(base, 3 * A::kGiB);
  b.Alloc(base, 3 * A::kGiB, b.Stack(12, "load"));
  b.Oom(2 * A::kGiB, 100 * A::kGiB);
  trace::Trace t = b.Take();
  Note at_oom;
  at_oom.self = 3 * A::kGiB + 500 * A::kMiB;
  at_oom.at_oom = true;
  AddNote(&t, at_oom);
  const Report r = BuildReport(t, {});
  EXPECT_TRUE(r.outside.known());
  const std::string outside = FormatOutside(r.outside);
  EXPECT_NE(outside.find("  at the OOM: allocator reserved 3.00 GiB"), std::string::npos)
      << outside;
  EXPECT_EQ(outside.find("at the peak"), std::string::npos) << outside;
  const std::string verdict = Verdict(r);
  EXPECT_NE(verdict.find("; the allocator held 3.00 GiB, context and unseen 500.00 MiB, other "
                         "processes 400.00 MiB"),
            std::string::npos)
      << verdict;
}

}  // namespace
}  // namespace gpumem::report
