// Synthetic traces with a known cause of OOM are classified right, with figures that
// follow from how each trace was built (see synthetic.h).
#include "gtest/gtest.h"
#include "tools/report/json_report.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"

namespace gpumem::report {
namespace {

using synthetic::kCapacity;
using synthetic::kMiB;

TEST(SyntheticOom, LeakIsALeak) {
  trace::Trace t = synthetic::LeakTrace();
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.method, StepMethod::kStepEvents);
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  EXPECT_EQ(r.leaks.suspects[0].name, "train.py:42 train_step");
  EXPECT_DOUBLE_EQ(r.leaks.suspects[0].bytes_per_step, static_cast<double>(synthetic::kLeakPerStep));
  // Reserved starts at 384 MiB and grows 16 MiB a step: full after 40 steps, so the
  // request in step 41 fails.
  EXPECT_EQ(r.ooms[0].at.step + 1, 41u);
  EXPECT_EQ(r.ooms[0].at.request, 16 * kMiB);
  EXPECT_EQ(r.ooms[0].capacity, kCapacity);
  // The leak is what projected the OOM: the projection lands on the step it happened.
  ASSERT_TRUE(r.projected_oom_step.has_value());
  EXPECT_NEAR(static_cast<double>(*r.projected_oom_step), 40.0, 1.0);
}

TEST(SyntheticOom, FragmentationIsFragmentation) {
  trace::Trace t = synthetic::FragmentationTrace();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cls, OomClass::kFragmentation) << x.evidence;
  EXPECT_TRUE(r.leaks.suspects.empty());
  EXPECT_EQ(x.free_cached, 256 * kMiB);  // every other 16 MiB block of 512 MiB
  EXPECT_EQ(x.at.largest_free_piece, 16 * kMiB);
  EXPECT_EQ(x.at.request, 128 * kMiB);
  ASSERT_TRUE(x.replay.has_value());
  EXPECT_TRUE(x.replay->ran) << x.replay->error;
}

TEST(SyntheticOom, PeakIsAPeak) {
  trace::Trace t = synthetic::PeakTrace();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cls, OomClass::kPeak) << x.evidence;
  EXPECT_TRUE(r.leaks.suspects.empty());
  EXPECT_EQ(x.at.step + 1, 11u);
  EXPECT_EQ(x.at.allocated, kCapacity);  // 256 MiB + 12 x 64 MiB
  EXPECT_EQ(x.free_cached, 0u);
  EXPECT_FALSE(r.projected_oom_step.has_value());
}

TEST(SyntheticOom, JsonCarriesTheClassAndFigures) {
  trace::Trace t = synthetic::FragmentationTrace();
  nlohmann::json j = ReportToJson(BuildReport(t, {}));
  ASSERT_EQ(j["ooms"].size(), 1u);
  EXPECT_EQ(j["ooms"][0]["class"], "fragmentation");
  EXPECT_EQ(j["ooms"][0]["largest_free_piece"], 16 * kMiB);
  EXPECT_EQ(j["steps"]["method"], "step-events");
  EXPECT_TRUE(j["projected_oom_step"].is_null());
  EXPECT_TRUE(j["leak_suspects"].empty());
}

}  // namespace
}  // namespace gpumem::report
