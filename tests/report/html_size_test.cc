// The HTML page's data is bounded whatever the trace's length: the timeline has a fixed
// number of points whose envelope still holds the peak, the page of a 1M-event trace is
// under the stated bound and no larger than that of a 100k-event one by much.
#include <algorithm>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "tools/report/detail.h"
#include "tools/report/html_parts.h"
#include "tools/report/html_report.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/report/view_series.h"

namespace gpumem::report {
namespace {

// docs/report.md states this bound for one trace's page.
constexpr std::size_t kPageBound = 4u << 20;

std::size_t PageBytes(const trace::Trace& t) {
  ReportOptions options;
  options.capacity = 64ull << 30;
  std::vector<Report> reports;
  reports.push_back(BuildReport(t, options));
  return RenderHtml(reports).size();
}

TEST(HtmlSize, PageIsBoundedAndBarelyGrowsWithTheTrace) {
  const std::size_t small = PageBytes(synthetic::LargeTrace(100'000));
  const std::size_t large = PageBytes(synthetic::LargeTrace(1'000'000));
  EXPECT_LE(large, kPageBound);
  std::printf("page bytes: %zu for 100k events, %zu for 1M\n", small, large);
  EXPECT_LT(large, small * 3 / 2) << small << " -> " << large;
}

TEST(HtmlSize, ViewKeepsThePeakAndItsPlaceInSteps) {
  const trace::Trace t = synthetic::LargeTrace(300'000);
  const Report r = BuildReport(t, {});
  const Detail d = BuildDetail(r, 1000, html::kTopSites);
  ASSERT_LE(d.view.points.size(), 1000u);
  ASSERT_GE(d.view.points.size(), 990u);
  std::uint64_t highest = 0;
  double last_pos = 0;
  for (const ViewPoint& p : d.view.points) {
    EXPECT_LE(p.allocated_min, p.allocated_end);
    EXPECT_LE(p.allocated_end, p.allocated_max);
    EXPECT_GE(p.step_pos, last_pos);
    last_pos = p.step_pos;
    highest = std::max(highest, p.allocated_max);
  }
  EXPECT_EQ(highest, r.timeline.peak_allocated);
  // The last point ends the trace, and the stretch after the last step end in full.
  EXPECT_EQ(d.view.points.back().index, t.events.size() - 1);
  EXPECT_DOUBLE_EQ(last_pos, static_cast<double>(r.steps.StepOf(t.events.size() - 1) + 1));
  EXPECT_GE(last_pos, static_cast<double>(r.steps.ends.size()));
  ASSERT_EQ(d.view.site_values.size(), d.top_sites.size());
  for (const auto& v : d.view.site_values) EXPECT_EQ(v.size(), d.view.points.size());
}

// Around the peak, one point an event, the peak itself among them.
TEST(HtmlSize, DetailWindowHoldsThePeakEventByEvent) {
  const trace::Trace t = synthetic::LargeTrace(300'000);
  const Report r = BuildReport(t, {});
  const Detail d = BuildDetail(r, 1000, html::kTopSites, 2048);
  ASSERT_GE(d.detail_views.size(), 1u);
  const ViewSeries& peak = d.detail_views[0];
  ASSERT_EQ(peak.points.size(), 2048u);
  bool seen = false;
  for (std::size_t k = 0; k < peak.points.size(); ++k) {
    const ViewPoint& p = peak.points[k];
    if (k > 0) {
      EXPECT_EQ(p.index, peak.points[k - 1].index + 1);
    }
    EXPECT_EQ(p.allocated_min, p.allocated_max);  // a single event each
    seen = seen || (p.index == r.timeline.peak_allocated_index && p.allocated_end == r.timeline.peak_allocated);
  }
  EXPECT_TRUE(seen);
  // No window where the whole view has a point an event already.
  EXPECT_TRUE(BuildDetail(r, t.events.size(), html::kTopSites, 2048).detail_views.empty());
  EXPECT_EQ(DetailWindow(100, 3, 10).begin, 0u);   // clamped at the start
  EXPECT_EQ(DetailWindow(100, 98, 10).end, 100u);  // and at the end
  EXPECT_EQ(DetailWindow(5, 3, 10).end, 5u);       // a short trace whole
}

TEST(HtmlSize, StepPositionRunsThroughEachStep) {
  Steps steps;
  steps.ends = {10, 20};
  steps.count = 3;
  EXPECT_DOUBLE_EQ(StepPosition(steps, 40, 0), 0.1);
  EXPECT_DOUBLE_EQ(StepPosition(steps, 40, 9), 1.0);
  EXPECT_DOUBLE_EQ(StepPosition(steps, 40, 10), 1.1);
  EXPECT_DOUBLE_EQ(StepPosition(steps, 40, 39), 3.0);  // the unfinished step, to the end
}

}  // namespace
}  // namespace gpumem::report
