#include "tools/trace/tsv_reader.h"

#include <gtest/gtest.h>

#include "tools/trace/load.h"

namespace gpumem::trace {
namespace {

TEST(TsvReaderTest, ReadsEventsAndInternsStacks) {
  auto trace = ParseTsvTrace(
      "# seq\taction\taddr\tsize\tstream\ttime_us\tstack\n"
      "0\tsegment_alloc\t4096\t2097152\t0\t10\t7\n"
      "1\talloc\t4096\t512\t0\t11\t7\n"
      "2\tfree_requested\t4096\t512\t0\t12\t9\n"
      "S\t7\ta.py:3:f | b.py:10:main\n"
      "S\t9\tb.py:10:main\n",
      "t.tsv");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->events.size(), 3u);
  EXPECT_EQ(trace->events[1].action, Action::kAlloc);
  EXPECT_EQ(trace->events[1].size, 512u);
  const auto& stack = trace->stacks[trace->events[1].stack_id];
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(trace->frames[stack[0]].filename, "a.py");
  EXPECT_EQ(trace->frames[stack[0]].line, 3);
  EXPECT_EQ(trace->frames[stack[1]].function, "main");
  // b.py:10:main is stored once and shared by both stacks.
  EXPECT_EQ(trace->frames.size(), 2u);
}

TEST(TsvReaderTest, BadLinesAreNamed) {
  auto unknown = ParseTsvTrace("0\tmalloc\t1\t2\t0\t3\t0\n", "t.tsv");
  EXPECT_EQ(unknown.status().message(), "t.tsv: line 1: unknown action 'malloc'");
  auto short_line = ParseTsvTrace("0\talloc\t1\t512\n", "t.tsv");
  EXPECT_EQ(short_line.status().message(),
            "t.tsv: line 1: expected 7 tab-separated fields, found 4");
  auto number = ParseTsvTrace("0\talloc\tx\t512\t0\t3\t0\n", "t.tsv");
  EXPECT_EQ(number.status().message(), "t.tsv: line 1: a numeric field is not a number");
}

TEST(LoadTraceTest, ReadsTheRealGzippedTrace) {
  auto trace = LoadTrace(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp.trace.tsv.gz");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->events.size(), 3519u);
  EXPECT_TRUE(trace->warnings.empty());
}

TEST(LoadTraceTest, MissingFileIsAnError) {
  auto trace = LoadTrace("/nonexistent/trace.tsv");
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpumem::trace
