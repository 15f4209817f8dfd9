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

TEST(RankFromFileName, RankTagThenLastDigitsBeforeTheFirstDot) {
  EXPECT_EQ(RankFromFileName("out/gpumem-rank12-node3-991.gpumem"), 12);
  EXPECT_EQ(RankFromFileName("run-7.gpumem"), 7);
  EXPECT_EQ(RankFromFileName("/x/run-7.4411.gpumem"), 7);
  EXPECT_EQ(RankFromFileName("trace.gpumem"), std::nullopt);
}

RankSummary Rank(std::int64_t rank, double leak, const std::string& site = "") {
  RankSummary s;
  s.source = "r" + std::to_string(rank);
  s.rank = rank;
  s.rank_from = "header";
  s.world_size = 7;
  s.peak_allocated = 10ull << 30;
  s.leak_bytes_per_step = leak;
  s.leak_site = site;
  if (leak > 0) s.projected_oom_step = 500;
  return s;
}

// One leaking rank among healthy ones: named with its site, first out; no other flagged;
// ranks by number; the rank the world size promises but no trace holds is named.
TEST(MergeRanks, TheOneLeakingRankIsNamedAndNoOther) {
  std::vector<RankSummary> ranks;
  for (std::int64_t r : {5, 0, 3, 1, 2, 4}) {
    ranks.push_back(r == 3 ? Rank(r, 200.0 * (1 << 20), "train.py:88 keep") : Rank(r, 0));
  }
  Merged m = MergeRanks(std::move(ranks), {{"r9.gpumem", "no such file"}});
  ASSERT_EQ(m.ranks.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(*m.ranks[i].rank, static_cast<std::int64_t>(i));
    EXPECT_EQ(m.ranks[i].differs.empty(), i != 3) << m.ranks[i].differs;
  }
  EXPECT_NE(m.ranks[3].differs.find("train.py:88"), std::string::npos);
  EXPECT_EQ(m.first_out.rfind("rank 3 runs out first: at step 501", 0), 0u) << m.first_out;
  EXPECT_EQ(m.missing_ranks, std::vector<std::int64_t>{6});
  EXPECT_EQ(MergedToJson(m)["unread"][0]["source"], "r9.gpumem");
  EXPECT_NE(FormatMerged(m).find("not read: r9.gpumem"), std::string::npos);
}

}  // namespace
}  // namespace gpumem::report
