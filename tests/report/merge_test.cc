#include "tools/report/merge.h"

#include "gtest/gtest.h"
#include "tools/report/synthetic.h"

namespace gpumem::report {
namespace {

// Two "ranks": the peak trace peaks at 256 MiB + 12 x 64 MiB = 1 GiB before its OOM, the
// fragmentation trace at 448 MiB + 512 MiB = 960 MiB (synthetic.h).
TEST(MergeRanks, ImbalanceIsTheRatioOfPeaks) {
  trace::Trace a = synthetic::PeakTrace();
  trace::Trace b = synthetic::FragmentationTrace();
  a.source = "rank0";
  b.source = "rank1";
  std::vector<Report> reports;
  reports.push_back(BuildReport(a, {}));
  reports.push_back(BuildReport(b, {}));
  Merged m = MergeRanks(reports);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].peak_allocated, 1024 * synthetic::kMiB);
  EXPECT_EQ(m.ranks[1].peak_allocated, 960 * synthetic::kMiB);
  EXPECT_DOUBLE_EQ(m.imbalance, 1024.0 / 960.0);
  EXPECT_NE(m.summary.find("rank0"), std::string::npos);  // the highest is named
  EXPECT_EQ(MergedToJson(m)["ranks"].size(), 2u);
}

}  // namespace
}  // namespace gpumem::report
