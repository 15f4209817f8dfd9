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
  // Steps are numbered from 1 in the JSON, as the text says them.
  EXPECT_EQ(MergedToJson(m)["ranks"][3]["projected_oom_step"], 501);
  EXPECT_TRUE(MergedToJson(m)["ranks"][0]["projected_oom_step"].is_null());
  EXPECT_NE(FormatMerged(m).find("not read: r9.gpumem"), std::string::npos);
}

}  // namespace
}  // namespace gpumem::report

namespace gpumem::report {
namespace {

RankSummary OnHost(std::int64_t rank, std::int64_t pid,
                   std::optional<std::vector<ProcessBytes>> others) {
  RankSummary s;
  s.source = "run-" + std::to_string(rank) + ".gpumem";
  s.rank = rank;
  s.rank_from = "header";
  s.host = "node1";
  s.pid = pid;
  s.peak_allocated = 10ull << 30;
  s.other_processes = std::move(others);
  return s;
}

// Every rank touched cuda:0 before set_device: rank 0's GPU holds the other ranks'
// contexts, named by rank, with the fix; a stranger's process by pid; no other rank
// flagged, and a rank NVML listed nothing beside (or was not read on) says nothing.
TEST(MergeRanks, OtherRanksContextsOnARanksGpuAreNamedByRank) {
  constexpr std::uint64_t kContext = 500ull << 20;
  std::vector<RankSummary> ranks;
  ranks.push_back(OnHost(0, 100, std::vector<ProcessBytes>{{101, kContext}, {102, kContext},
                                                           {777, 2 * kContext}}));
  ranks.push_back(OnHost(1, 101, std::vector<ProcessBytes>{}));
  ranks.push_back(OnHost(2, 102, std::nullopt));
  Merged m = MergeRanks(std::move(ranks));
  ASSERT_EQ(m.ranks.size(), 3u);
  EXPECT_EQ(m.ranks[0].differs,
            "other processes hold 1.95 GiB of its GPU: pid 777 1000.00 MiB, rank 1 (pid 101) "
            "500.00 MiB, rank 2 (pid 102) 500.00 MiB (other ranks made a CUDA context here: each "
            "rank should call torch.cuda.set_device(local_rank) before its first CUDA call)");
  EXPECT_EQ(m.ranks[1].differs, "");
  EXPECT_EQ(m.ranks[2].differs, "");
  const nlohmann::json j = MergedToJson(m);
  EXPECT_EQ(j["ranks"][0]["pid"], 100);
  EXPECT_EQ(j["ranks"][0]["other_processes"].size(), 3u);
  EXPECT_EQ(j["ranks"][1]["other_processes"].size(), 0u);
  EXPECT_TRUE(j["ranks"][2]["other_processes"].is_null());
}

// A pid on another host is not that host's rank; a process alone, no rank: no fix.
TEST(MergeRanks, AnotherHostsPidIsNotARank) {
  std::vector<RankSummary> ranks;
  ranks.push_back(OnHost(0, 100, std::vector<ProcessBytes>{{101, 600ull << 20}}));
  ranks.push_back(OnHost(1, 101, std::vector<ProcessBytes>{}));
  ranks[1].host = "node2";
  Merged m = MergeRanks(std::move(ranks));
  EXPECT_EQ(m.ranks[0].differs, "other processes hold 600.00 MiB of its GPU: pid 101 600.00 MiB");
}

}  // namespace
}  // namespace gpumem::report
