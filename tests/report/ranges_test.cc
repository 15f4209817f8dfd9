#include "tools/report/ranges.h"

#include "gtest/gtest.h"

namespace gpumem::report {
namespace {

TEST(RangeSet, MergesTouchingRangesAndSplitsOnRemove) {
  RangeSet r;
  r.Add(100, 50);
  r.Add(150, 50);  // touches: one range [100, 200)
  ASSERT_EQ(r.ranges().size(), 1u);
  EXPECT_EQ(r.ranges().begin()->second, 200u);
  EXPECT_EQ(r.Remove(120, 10), 10u);  // a hole in the middle
  ASSERT_EQ(r.ranges().size(), 2u);
  EXPECT_EQ(r.ranges().at(100), 120u);
  EXPECT_EQ(r.ranges().at(130), 200u);
  EXPECT_EQ(r.Remove(0, 1000), 90u);
  EXPECT_TRUE(r.ranges().empty());
}

}  // namespace
}  // namespace gpumem::report
