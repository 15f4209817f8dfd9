// gpumem export --format pprof: the profile read back with the protobuf library holds the
// report's live bytes at the chosen moment, and known stacks with known values.
#include "tools/pprof/pprof_export.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/pprof/profile_reader.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/report/synthetic_builder.h"
#include "tools/trace/load.h"

namespace gpumem::pprof {
namespace {

using perftools::profiles::Profile;
using report::ProfilePoint;
using report::synthetic::kMiB;
using testing::Frames;
using testing::ParseGzipped;
using testing::Totals;
using testing::ValuesOf;

constexpr std::size_t kAllocObjects = 0, kAllocSpace = 1, kInuseObjects = 2, kInuseSpace = 3;

report::Report Analyse(const trace::Trace& t) {
  report::ReportOptions options;
  options.replay_fragmentation = false;
  return report::BuildReport(t, options);
}

Profile Export(const report::Report& r, const std::string& at) {
  absl::StatusOr<ProfilePoint> point = report::ParseProfilePoint(at);
  EXPECT_TRUE(point.ok()) << point.status();
  absl::StatusOr<report::StackProfile> profile = report::BuildStackProfile(r, *point);
  EXPECT_TRUE(profile.ok()) << profile.status();
  if (!profile.ok()) return Profile();
  absl::StatusOr<std::string> bytes = ExportPprof(*r.trace, *profile);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? ParseGzipped(*bytes) : Profile();
}

// The synthetic leak trace (synthetic.h): stacks are torch's linear forward, then
// train.py:LINE, then the script's entry.
std::vector<std::string> TrainStack(int line, const std::string& function) {
  return {"site-packages/torch/nn/modules/linear.py:125 forward",
          "train.py:" + std::to_string(line) + " " + function, "train.py:200 <module>"};
}

std::vector<std::int64_t> Values(std::uint64_t allocs, std::uint64_t alloc_bytes,
                                 std::uint64_t inuse, std::uint64_t inuse_bytes) {
  return {static_cast<std::int64_t>(allocs), static_cast<std::int64_t>(alloc_bytes),
          static_cast<std::int64_t>(inuse), static_cast<std::int64_t>(inuse_bytes)};
}

TEST(PprofExport, SampleTypesAndTables) {
  trace::Trace t = report::synthetic::LeakTrace();
  Profile p = Export(Analyse(t), "peak");
  EXPECT_EQ(testing::SampleTypes(p),
            (std::vector<std::string>{"alloc_objects/count", "alloc_space/bytes",
                                      "inuse_objects/count", "inuse_space/bytes"}));
  ASSERT_GT(p.string_table_size(), 0);
  EXPECT_EQ(p.string_table(0), "");
  EXPECT_EQ(p.string_table(p.default_sample_type()), "inuse_space");
  EXPECT_EQ(p.string_table(p.period_type().type()), "space");
  ASSERT_EQ(p.mapping_size(), 1);
  EXPECT_TRUE(p.mapping(0).has_functions());
  for (const auto& loc : p.location()) EXPECT_EQ(loc.mapping_id(), p.mapping(0).id());
  EXPECT_EQ(p.sample_size(), 3);  // parameters, activations, the leak
  for (const auto& s : p.sample()) {
    ASSERT_EQ(s.label_size(), 1);
    EXPECT_EQ(p.string_table(s.label(0).key()), "device");
    EXPECT_EQ(p.string_table(s.label(0).str()), "cuda:0");
  }
}

// The leak trace runs out in step 41 with 128 MiB of parameters, 40 x 16 MiB leaked and
// the step's 256 MiB of activations live: 1 GiB, the capacity.
TEST(PprofExport, AtTheOomTotalsAndStacksAreKnown) {
  trace::Trace t = report::synthetic::LeakTrace();
  report::Report r = Analyse(t);
  ASSERT_TRUE(r.fatal_oom.has_value());
  Profile p = Export(r, "oom");
  const std::vector<std::int64_t> totals = Totals(p);
  ASSERT_EQ(totals.size(), 4u);
  EXPECT_EQ(static_cast<std::uint64_t>(totals[kInuseSpace]), r.ooms[*r.fatal_oom].at.allocated);
  EXPECT_EQ(static_cast<std::uint64_t>(totals[kInuseSpace]), report::synthetic::kCapacity);
  EXPECT_EQ(totals[kInuseObjects], 1 + 40 + 1);
  EXPECT_EQ(ValuesOf(p, TrainStack(42, "train_step")), Values(40, 40 * 16 * kMiB, 40, 40 * 16 * kMiB));
  EXPECT_EQ(ValuesOf(p, TrainStack(40, "train_step")), Values(41, 41 * 256 * kMiB, 1, 256 * kMiB));
  EXPECT_EQ(ValuesOf(p, TrainStack(10, "build_model")), Values(1, 128 * kMiB, 1, 128 * kMiB));
}

TEST(PprofExport, AtThePeakTotalIsTheReportsPeak) {
  trace::Trace t = report::synthetic::PeakTrace();
  report::Report r = Analyse(t);
  Profile p = Export(r, "peak");
  ASSERT_EQ(Totals(p).size(), 4u);
  EXPECT_EQ(static_cast<std::uint64_t>(Totals(p)[kInuseSpace]), r.timeline.peak_allocated);
  EXPECT_GT(r.timeline.peak_allocated, 0u);
}

// At the end of step 10: parameters and ten leaked blocks live; ten activations were
// allocated and freed.
TEST(PprofExport, AtAStepEnd) {
  trace::Trace t = report::synthetic::LeakTrace();
  report::Report r = Analyse(t);
  ASSERT_GE(r.timeline.sample_step.size(), 10u);
  ASSERT_EQ(r.timeline.sample_step[9], 9u);
  Profile p = Export(r, "step:10");
  ASSERT_EQ(Totals(p).size(), 4u);
  EXPECT_EQ(static_cast<std::uint64_t>(Totals(p)[kInuseSpace]), r.timeline.sample_allocated[9]);
  EXPECT_EQ(static_cast<std::uint64_t>(Totals(p)[kInuseSpace]), (128 + 160) * kMiB);
  EXPECT_EQ(ValuesOf(p, TrainStack(42, "train_step")), Values(10, 160 * kMiB, 10, 160 * kMiB));
  EXPECT_EQ(ValuesOf(p, TrainStack(40, "train_step")), Values(10, 2560 * kMiB, 0, 0));
}

TEST(PprofExport, AllocationsWithoutAStackGetOneFrame) {
  report::synthetic::Builder b;
  b.Alloc(0x1000, 4096, 0);
  trace::Trace t = b.Take();
  Profile p = Export(Analyse(t), "peak");
  ASSERT_EQ(p.sample_size(), 1);
  EXPECT_EQ(Frames(p, p.sample(0)), std::vector<std::string>{":0 <no stack recorded>"});
  EXPECT_EQ(Totals(p), Values(1, 4096, 1, 4096));
}

TEST(PprofExport, MomentsTheTraceLacksAreErrors) {
  report::synthetic::Builder b;
  b.Alloc(0x1000, 4096, b.Stack(7, "main"));
  trace::Trace no_oom = b.Take();
  absl::StatusOr<report::StackProfile> p =
      report::BuildStackProfile(Analyse(no_oom), {ProfilePoint::Kind::kOom, 0});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("no OOM"), std::string::npos) << p.status();
  trace::Trace leak = report::synthetic::LeakTrace();
  p = report::BuildStackProfile(Analyse(leak), {ProfilePoint::Kind::kStep, 41});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("40 step ends"), std::string::npos) << p.status();
}

TEST(PprofExport, ParsesTheMoment) {
  EXPECT_EQ(report::ParseProfilePoint("peak")->kind, ProfilePoint::Kind::kPeak);
  EXPECT_EQ(report::ParseProfilePoint("oom")->kind, ProfilePoint::Kind::kOom);
  EXPECT_EQ(report::ParseProfilePoint("step:12")->step, 12u);
  for (const char* bad : {"", "Peak", "step:", "step:0", "step:x", "step:-1", "oom:1", "step:3x"}) {
    EXPECT_FALSE(report::ParseProfilePoint(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace gpumem::pprof
