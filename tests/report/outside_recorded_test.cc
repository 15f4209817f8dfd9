// Memory outside the allocator from files the recorder wrote, as `gpumem report` reads
// them: NAME.gpumem with the allocator's segments and step ends carrying the driver's
// figures, and NAME.cupti.gpumem, opened later, with driver calls whose stacks start with
// the CUPTI tracer's API frame.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "profiler/process_note.h"
#include "profiler/recorder.h"
#include "tests/profiler/trace_test_util.h"
#include "tools/report/cupti_companion.h"
#include "tools/report/json_report.h"
#include "tools/report/rank_summary.h"
#include "tools/report/report.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kTotal = 80ull << 30;
constexpr std::uint64_t kReserved = 512 * kMiB;
constexpr std::uint64_t kOutside = 96 * kMiB;   // an unnamed caller (no native stacks)
constexpr std::uint64_t kContext = 500 * kMiB;  // counted by the driver only

RecorderOptions Options(const std::string& path) {
  RecorderOptions options;
  options.path = path;
  options.stacks = StackMode::kNone;
  options.live_view = false;
  return options;
}

void WriteCupti(const std::string& path) {
  auto r = Recorder::Open(Options(path));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::uint32_t api = (*r)->writer().stacks().InternNamedFrame(
      format::FrameKind::kApi, "cuMemAlloc_v2", "[cuda-driver]", 0);
  (*r)->RecordEvent(format::RecordType::kSegmentAlloc, 0, 0x900000000, kOutside, 0, api);
  ASSERT_TRUE((*r)->Close().ok());
}

// The main trace opens first; the CUPTI trace's calls come before its first step end.
void WriteMain(const std::string& path, const std::string& cupti) {
  auto r = Recorder::Open(Options(path));
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->OnEvent({AllocatorEventKind::kMap, 0, 0x7f0000000000, kReserved, 0});
  usleep(2000);
  WriteCupti(cupti);
  const std::uint64_t step =
      (*r)->Step(DriverMemory{0, kTotal - kReserved - kOutside - kContext, kTotal});
  // NVML's read, as the step hook writes it: this process alone on the device.
  format::ProcessNote note{step, {kReserved + kOutside + kContext, {}}};
  (*r)->Annotate(0, format::ProcessNoteText(note));
  ASSERT_TRUE((*r)->Close().ok());
}

std::string Temp(const std::string& name) { return gpumem::testing::TempPath("outside_" + name); }

TEST(OutsideRecorded, ReportReadsTheCuptiTraceBesideTheMainOne) {
  const std::string main_path = Temp("run-0.gpumem");
  const std::string cupti_path = CuptiCompanionPath(main_path);
  ASSERT_NO_FATAL_FAILURE(WriteMain(main_path, cupti_path));
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(main_path);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::optional<trace::Trace> cupti = LoadCuptiCompanion(main_path);
  ASSERT_TRUE(cupti.has_value());
  ReportOptions options;
  options.cupti = &*cupti;
  const nlohmann::json j = ReportToJson(BuildReport(*t, options))["outside_allocator"];
  EXPECT_EQ(j["calls_recorded"], true);
  EXPECT_EQ(j["driver_sampled"], true);
  EXPECT_EQ(j["end"]["step"], 1);
  EXPECT_EQ(j["end"]["allocator_reserved"], kReserved);
  EXPECT_EQ(j["end"]["outside"]["unknown"], kOutside);
  EXPECT_EQ(j["end"]["driver_used"], kReserved + kOutside + kContext);
  EXPECT_EQ(j["end"]["remainder"], kContext);
  EXPECT_EQ(j["end"]["processes"]["at_moment"], true);
  EXPECT_EQ(j["end"]["processes"]["context_and_unseen"], kContext);
  EXPECT_EQ(j["end"]["processes"]["unnamed"], 0);
  // The merged view's: the recording process and, NVML read at the peak, no other one.
  const RankSummary rank = SummarizeRank(BuildReport(*t, options), 0);
  EXPECT_EQ(rank.pid, getpid());
  ASSERT_TRUE(rank.other_processes);
  EXPECT_TRUE(rank.other_processes->empty());
  // Alone, the main trace knows only the driver's count.
  const nlohmann::json alone = ReportToJson(BuildReport(*t, {}))["outside_allocator"];
  EXPECT_EQ(alone["calls_recorded"], false);
  EXPECT_EQ(alone["end"]["remainder"], kOutside + kContext);
  std::remove(main_path.c_str());
  std::remove(cupti_path.c_str());
}

}  // namespace
}  // namespace gpumem::report
