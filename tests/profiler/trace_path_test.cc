#include "profiler/trace_path.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace gpumem {
namespace {

TEST(TracePathTest, ExpandsPidRankAndPercent) {
  EXPECT_EQ(ExpandTracePath("run-%r.gpumem", 42, "3"), "run-3.gpumem");
  EXPECT_EQ(ExpandTracePath("runs/%p/t-%r-%p.gpumem", 7, "0"), "runs/7/t-0-7.gpumem");
  EXPECT_EQ(ExpandTracePath("100%%-%x-%", 1, "0"), "100%-%x-%");
  EXPECT_EQ(ExpandTracePath("plain.gpumem", 1, "0"), "plain.gpumem");
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
