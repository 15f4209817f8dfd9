// gpumem diff: live bytes by site at two step ends of a synthetic trace with a known
// answer, two runs matched by name, the JSON and HTML shapes, errors, and a real trace
// whose figures must agree with the report's own step-end samples.
#include <cstdint>
#include <numeric>
#include <string>

#include "gtest/gtest.h"
#include "tools/report/diff.h"
#include "tools/report/diff_output.h"
#include "tools/report/report.h"
#include "tools/report/synthetic_builder.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

// Three marked steps. At the end of step 1: grow 1 MiB, gone 2 MiB, steady 1 MiB. By the
// end of step 3 grow holds 3 MiB, gone was freed, new holds 4 MiB, steady is unchanged.
// Each step also allocates and frees a temporary.
trace::Trace ThreeSteps() {
  synthetic::Builder b;
  const std::uint32_t grow = b.Stack(10, "grow");
  const std::uint32_t gone = b.Stack(20, "gone");
  const std::uint32_t fresh = b.Stack(30, "fresh");
  const std::uint32_t steady = b.Stack(40, "steady");
  const std::uint32_t temp = b.Stack(50, "temp");
  b.Segment(0, 64 * kMiB);
  b.Alloc(0, kMiB, steady);
  b.Alloc(kMiB, 2 * kMiB, gone);
  for (int step = 0; step < 3; ++step) {
    b.Alloc((4 + step) * kMiB, kMiB, grow);
    b.Alloc(32 * kMiB, 8 * kMiB, temp);
    b.Free(32 * kMiB, 8 * kMiB, temp);
    if (step == 2) {
      b.Free(kMiB, 2 * kMiB, gone);
      b.Alloc(8 * kMiB, 4 * kMiB, fresh);
    }
    b.Step(trace::StepSource::kOptimizerHook);
  }
  return b.Take();
}

const SiteDiff* Find(const Diff& d, const std::string& site) {
  for (const SiteDiff& s : d.sites) {
    if (s.site == site) return &s;
  }
  return nullptr;
}

std::int64_t SumOfDeltas(const Diff& d) {
  return std::accumulate(d.sites.begin(), d.sites.end(), std::int64_t{0},
                         [](std::int64_t sum, const SiteDiff& s) { return sum + s.delta(); });
}

TEST(DiffSteps, GrowthNewAndGoneSitesBetweenTwoStepEnds) {
  const trace::Trace t = ThreeSteps();
  DiffOptions options;
  options.from_step = 1;
  options.to_step = 3;
  absl::StatusOr<Diff> d = DiffSteps(t, options);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->two_runs);
  EXPECT_EQ(d->from.step, 1u);
  EXPECT_EQ(d->to.step, 3u);
  EXPECT_EQ(d->from.steps.method, StepMethod::kStepEvents);
  EXPECT_EQ(d->from.live_bytes, 4 * kMiB);
  EXPECT_EQ(d->to.live_bytes, 8 * kMiB);
  ASSERT_EQ(d->sites.size(), 4u);  // the temporary is live at neither point
  // Largest growth first.
  EXPECT_EQ(d->sites[0].site, "train.py:30 fresh");
  EXPECT_EQ(d->sites[0].change(), SiteChange::kNew);
  EXPECT_EQ(d->sites[0].delta(), static_cast<std::int64_t>(4 * kMiB));
  EXPECT_EQ(d->sites[1].site, "train.py:10 grow");
  EXPECT_EQ(d->sites[1].change(), SiteChange::kGrown);
  EXPECT_EQ(d->sites[1].from_bytes, kMiB);
  EXPECT_EQ(d->sites[1].to_bytes, 3 * kMiB);
  EXPECT_EQ(d->sites[2].site, "train.py:40 steady");
  EXPECT_EQ(d->sites[2].change(), SiteChange::kUnchanged);
  EXPECT_EQ(d->sites[3].site, "train.py:20 gone");
  EXPECT_EQ(d->sites[3].change(), SiteChange::kGone);
  EXPECT_EQ(d->sites[3].delta(), -static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(SumOfDeltas(*d), static_cast<std::int64_t>(4 * kMiB));
  EXPECT_EQ(d->matched(), 2u);
}

TEST(DiffSteps, DefaultsToTheFirstAndLastStepEnds) {
  const trace::Trace t = ThreeSteps();
  absl::StatusOr<Diff> d = DiffSteps(t, {});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->from.step, 1u);
  EXPECT_EQ(d->to.step, 3u);
  // Between steps 1 and 2 only `grow` changed.
  DiffOptions options;
  options.from_step = 1;
  options.to_step = 2;
  absl::StatusOr<Diff> early = DiffSteps(t, options);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->Count(SiteChange::kGrown), 1u);
  EXPECT_EQ(early->Count(SiteChange::kNew), 0u);
  EXPECT_EQ(early->to.live_bytes - early->from.live_bytes, kMiB);
}

TEST(DiffSteps, AStepOutOfRangeNamesTheRange) {
  const trace::Trace t = ThreeSteps();
  for (std::size_t bad : {std::size_t{0}, std::size_t{4}}) {
    DiffOptions options;
    options.to_step = bad;
    absl::StatusOr<Diff> d = DiffSteps(t, options);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("--to " + std::to_string(bad)), std::string::npos);
    EXPECT_NE(d.status().message().find("synthetic has step ends 1..3"), std::string::npos)
        << d.status().message();
  }
  DiffOptions options;
  options.from_step = 9;
  EXPECT_NE(DiffSteps(t, options).status().message().find("--from 9"), std::string::npos);
}

TEST(DiffSteps, ATraceWithoutStepsIsAnError) {
  synthetic::Builder b;
  b.Alloc(0, kMiB, b.Stack(10, "once"));
  const trace::Trace t = b.Take();
  absl::StatusOr<Diff> d = DiffSteps(t, {});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("has no step ends (steps: none)"), std::string::npos)
      << d.status().message();
}

// One step; `extra` adds a site only this run has. Files live under `dir`, as a
// GPU-recorded trace's absolute paths do: names are shown relative to it, so runs from
// two checkouts still match.
trace::Trace OneStepRun(const std::string& dir, std::uint64_t model_bytes, bool extra, bool old_site) {
  synthetic::Builder b;
  b.Segment(0, 256 * kMiB);
  b.Alloc(0, model_bytes, b.Stack({{dir + "model.py", 12, "build"}}));
  b.Alloc(128 * kMiB, kMiB, b.Stack({{dir + "train.py", 60, "step"}}));
  if (extra) b.Alloc(160 * kMiB, 2 * kMiB, b.Stack({{dir + "train.py", 70, "cache"}}));
  if (old_site) b.Alloc(192 * kMiB, 3 * kMiB, b.Stack({{dir + "train.py", 80, "history"}}));
  b.Step();
  return b.Take();
}

TEST(DiffRuns, SitesMatchByNameAcrossCheckouts) {
  const trace::Trace before = OneStepRun("/checkout-a/repo/", 10 * kMiB, false, true);
  const trace::Trace after = OneStepRun("/checkout-b/repo/", 12 * kMiB, true, false);
  absl::StatusOr<Diff> d = DiffRuns(before, after, {});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->two_runs);
  EXPECT_EQ(d->from.step, 1u);  // each run's last step end
  EXPECT_EQ(d->to.step, 1u);
  EXPECT_EQ(d->from.sites_relative_to, "/checkout-a/repo/");
  EXPECT_EQ(d->to.sites_relative_to, "/checkout-b/repo/");
  EXPECT_EQ(d->matched(), 2u);
  const SiteDiff* model = Find(*d, "model.py:12 build");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->delta(), static_cast<std::int64_t>(2 * kMiB));
  const SiteDiff* same = Find(*d, "train.py:60 step");
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(same->change(), SiteChange::kUnchanged);
  const SiteDiff* added = Find(*d, "train.py:70 cache");
  ASSERT_NE(added, nullptr);
  EXPECT_EQ(added->change(), SiteChange::kNew);
  const SiteDiff* removed = Find(*d, "train.py:80 history");
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(removed->change(), SiteChange::kGone);
  EXPECT_EQ(SumOfDeltas(*d), static_cast<std::int64_t>(d->to.live_bytes - d->from.live_bytes));
  EXPECT_EQ(d->to.live_bytes, 15 * kMiB);
  EXPECT_EQ(d->from.live_bytes, 14 * kMiB);
}

TEST(DiffRuns, ARunWithoutStepsIsTakenAtItsEndUnlessAStepIsAsked) {
  synthetic::Builder b;
  b.Alloc(0, kMiB, b.Stack(10, "once"));
  const trace::Trace no_steps = b.Take();
  const trace::Trace stepped = ThreeSteps();
  absl::StatusOr<Diff> d = DiffRuns(no_steps, stepped, {});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->from.step.has_value());
  EXPECT_EQ(DescribePoint(d->from), "end of the trace");
  EXPECT_EQ(d->to.step, 3u);
  DiffOptions options;
  options.from_step = 1;
  EXPECT_NE(DiffRuns(no_steps, stepped, options).status().message().find("has no step ends"),
            std::string::npos);
  options.from_step = 2;
  options.to_step = 5;
  EXPECT_FALSE(DiffRuns(stepped, stepped, options).ok());
}

TEST(DiffJson, ShapeTopNAndTotals) {
  const trace::Trace t = ThreeSteps();
  absl::StatusOr<Diff> d = DiffSteps(t, {});
  ASSERT_TRUE(d.ok());
  const nlohmann::json j = DiffToJson(*d, 2);
  EXPECT_EQ(j["mode"], "steps");
  EXPECT_EQ(j["from"]["step"], 1);
  EXPECT_EQ(j["to"]["step"], 3);
  EXPECT_EQ(j["from"]["at"], "end of step 1 of 3");
  EXPECT_EQ(j["from"]["steps"]["method"], "step-events");
  EXPECT_EQ(j["from"]["steps"]["source"], "optimizer step hooks");
  EXPECT_TRUE(j["from"]["sites_relative_to"].is_null());
  ASSERT_EQ(j["sites"].size(), 2u);
  EXPECT_EQ(j["sites"][0]["site"], "train.py:30 fresh");
  EXPECT_EQ(j["sites"][0]["change"], "new");
  EXPECT_EQ(j["sites"][0]["from_bytes"], 0);
  EXPECT_EQ(j["sites"][0]["to_bytes"], 4 * kMiB);
  EXPECT_EQ(j["sites"][0]["delta_bytes"], 4 * kMiB);
  EXPECT_EQ(j["not_shown"]["sites"], 2);
  EXPECT_EQ(j["not_shown"]["delta_bytes"], -static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(j["counts"]["sites"], 4);
  EXPECT_EQ(j["counts"]["gone"], 1);
  EXPECT_EQ(j["counts"]["new"], 1);
  EXPECT_EQ(j["counts"]["matched"], 2);
  EXPECT_EQ(j["total"]["delta_bytes"], 4 * kMiB);
  EXPECT_EQ(DiffToJson(*d, 0)["sites"].size(), 4u);  // 0: all
}

TEST(DiffTerminal, TableTagsAndTotals) {
  const trace::Trace t = ThreeSteps();
  absl::StatusOr<Diff> d = DiffSteps(t, {});
  ASSERT_TRUE(d.ok());
  const std::string text = FormatDiffTerminal(*d, 3);
  EXPECT_NE(text.find("from: synthetic, end of step 1 of 3  (steps: step-events"), std::string::npos) << text;
  EXPECT_NE(text.find("+4.00 MiB  train.py:30 fresh  [new]"), std::string::npos) << text;
  EXPECT_NE(text.find("+2.00 MiB  train.py:10 grow\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("train.py:20 gone"), std::string::npos);  // fourth: not shown
  EXPECT_NE(text.find("-2.00 MiB  ... 1 more sites"), std::string::npos) << text;
  EXPECT_NE(text.find("4.00 MiB     8.00 MiB     +4.00 MiB  total (4 sites: 1 grown, 1 new"), std::string::npos)
      << text;
}

TEST(DiffHtml, OneSelfContainedPageWithTheJson) {
  synthetic::Builder b;
  b.Alloc(0, kMiB, b.Stack(10, "</script><b>x"));
  b.Step();
  b.Alloc(kMiB, kMiB, b.Stack(11, "later"));
  b.Step();
  const trace::Trace t = b.Take();
  absl::StatusOr<Diff> d = DiffSteps(t, {});
  ASSERT_TRUE(d.ok());
  const std::string page = RenderDiffHtml(*d, 20);
  EXPECT_EQ(page.find("/*GPUMEM_DATA*/"), std::string::npos);
  EXPECT_NE(page.find("\"mode\":\"steps\""), std::string::npos);
  EXPECT_NE(page.find("train.py:11 later"), std::string::npos);
  // A site name cannot end the data's <script> element.
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("<link "), std::string::npos);
}

// A real run (leaky_mlp, 59 inferred step ends): the diff's figures agree with
// themselves and with the report's own step-end samples.
TEST(DiffRealTrace, LeakyMlpFiguresAreConsistent) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp.trace.tsv.gz");
  ASSERT_TRUE(t.ok()) << t.status();
  DiffOptions options;
  options.from_step = 2;
  options.to_step = 10;
  absl::StatusOr<Diff> d = DiffSteps(*t, options);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(SumOfDeltas(*d), static_cast<std::int64_t>(d->to.live_bytes) -
                                 static_cast<std::int64_t>(d->from.live_bytes));
  std::uint64_t from_sum = 0, to_sum = 0;
  for (const SiteDiff& s : d->sites) {
    from_sum += s.from_bytes;
    to_sum += s.to_bytes;
  }
  EXPECT_EQ(from_sum, d->from.live_bytes);
  EXPECT_EQ(to_sum, d->to.live_bytes);
  // The leak grows most.
  ASSERT_FALSE(d->sites.empty());
  EXPECT_EQ(d->sites[0].site, "capture.py:78 leaky_mlp");
  EXPECT_GT(d->sites[0].delta(), 0);
  // The report samples every step end of a short trace: the same live bytes there.
  const Report r = BuildReport(*t, {});
  ASSERT_EQ(r.steps.ends.size(), d->from.steps.ends.size());
  ASSERT_GE(r.timeline.sample_step.size(), 10u);
  ASSERT_EQ(r.timeline.sample_step[1], 1u);
  ASSERT_EQ(r.timeline.sample_step[9], 9u);
  EXPECT_EQ(r.timeline.sample_allocated[1], d->from.live_bytes);
  EXPECT_EQ(r.timeline.sample_allocated[9], d->to.live_bytes);
}

}  // namespace
}  // namespace gpumem::report
