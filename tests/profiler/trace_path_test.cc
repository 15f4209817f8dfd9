#include "profiler/trace_path.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

namespace gpumem {
namespace {

TEST(TracePathTest, ExpandsPidRankAndPercent) {
  EXPECT_EQ(ExpandTracePath("run-%r.gpumem", 42, "3"), "run-3.gpumem");
  EXPECT_EQ(ExpandTracePath("runs/%p/t-%r-%p.gpumem", 7, "0"), "runs/7/t-0-7.gpumem");
  EXPECT_EQ(ExpandTracePath("100%%-%x-%", 1, "0"), "100%-%x-%");
  EXPECT_EQ(ExpandTracePath("plain.gpumem", 1, "0"), "plain.gpumem");
}

TEST(TracePathTest, ExpandsLocalRankAndHost) {
  TraceNameParts parts;
  parts.pid = 9;
  parts.rank = "12";
  parts.local_rank = "4";
  parts.host = "node7";
  EXPECT_EQ(ExpandTracePath("run-%r-%l-%h-%p.gpumem", parts), "run-12-4-node7-9.gpumem");
  EXPECT_EQ(ExpandTracePath("%h/%l%%", parts), "node7/4%");
}

TEST(TracePathTest, ThisProcessFillsEveryField) {
  setenv("RANK", "3", 1);
  setenv("LOCAL_RANK", "1", 1);
  const TraceNameParts parts = TraceNameParts::OfThisProcess();
  EXPECT_EQ(parts.pid, static_cast<long>(getpid()));
  EXPECT_EQ(parts.rank, "3");
  EXPECT_EQ(parts.local_rank, "1");
  EXPECT_FALSE(parts.host.empty());
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
}

TEST(TracePathTest, SlurmRanksWhereTorchrunsAreUnset) {
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
  setenv("SLURM_PROCID", "17", 1);
  setenv("SLURM_LOCALID", "2", 1);
  EXPECT_EQ(GlobalRankFromEnvironment(), "17");
  EXPECT_EQ(LocalRankFromEnvironment(), "2");
  EXPECT_EQ(RankFromEnvironment(), "17");
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_LOCALID");
  EXPECT_EQ(GlobalRankFromEnvironment(), "");
}

// Ranks of a multi-node job sharing a folder: the default name holds rank, host and pid.
TEST(TracePathTest, DefaultNameHoldsRankAndHostInARankedJob) {
  unsetenv("RANK");
  unsetenv("SLURM_PROCID");
  EXPECT_EQ(DefaultTracePattern(), "gpumem-%p.gpumem");
  setenv("RANK", "5", 1);
  EXPECT_EQ(DefaultTracePattern(), "gpumem-rank%r-%h-%p.gpumem");
  unsetenv("RANK");
}

TEST(TracePathTest, RankComesFromTorchrunVariables) {
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(RankFromEnvironment(), "0");
  setenv("LOCAL_RANK", "5", 1);
  EXPECT_EQ(RankFromEnvironment(), "5");
  setenv("RANK", "13", 1);
  EXPECT_EQ(RankFromEnvironment(), "13");
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
}

TEST(TracePathTest, PathWithPidGoesBeforeTheExtension) {
  EXPECT_EQ(PathWithPid("run-0.gpumem", 77), "run-0.77.gpumem");
  EXPECT_EQ(PathWithPid("out/run-0.cupti.gpumem", 77), "out/run-0.cupti.77.gpumem");
  EXPECT_EQ(PathWithPid("trace", 77), "trace.77");
  EXPECT_EQ(PathWithPid("runs.d/trace", 77), "runs.d/trace.77");
  EXPECT_EQ(PathWithPid(".hidden", 77), ".hidden.77");
}

}  // namespace
}  // namespace gpumem
