// gpumem export --format pprof on the bundled real traces (tests/data): the profile at the
// peak holds the report's peak, every allocation made before it, and stacks leaf first.
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/pprof/profile_reader.h"
#include "tools/pprof/pprof_export.h"
#include "tools/report/report.h"
#include "tools/report/stack_profile.h"
#include "tools/report/verdict_rules.h"
#include "tools/trace/load.h"

namespace gpumem::pprof {
namespace {

struct RealTrace {
  const char* file;
  const char* leak_site;  // the report's top suspect (docs/report.md, `gpumem report`)
};

void PrintTo(const RealTrace& t, std::ostream* os) { *os << t.file; }

class PprofRealTrace : public ::testing::TestWithParam<RealTrace> {};

TEST_P(PprofRealTrace, AtThePeak) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/" + GetParam().file);
  ASSERT_TRUE(t.ok()) << t.status();
  report::ReportOptions options;
  options.replay_fragmentation = false;
  report::Report r = report::BuildReport(*t, options);
  absl::StatusOr<report::StackProfile> sp = report::BuildStackProfile(r, {});
  ASSERT_TRUE(sp.ok()) << sp.status();
  absl::StatusOr<std::string> bytes = ExportPprof(*t, *sp);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  perftools::profiles::Profile p = testing::ParseGzipped(*bytes);

  // Allocations before the moment, counted here from the events, in the device bytes
  // (512-byte blocks) the report counts.
  std::int64_t allocs = 0, alloc_bytes = 0;
  for (std::size_t i = 0; i < sp->index; ++i) {
    if (t->events[i].action != trace::Action::kAlloc) continue;
    ++allocs;
    alloc_bytes += static_cast<std::int64_t>(report::DeviceBytes(t->events[i].size));
  }
  const std::vector<std::int64_t> totals = testing::Totals(p);
  ASSERT_EQ(totals.size(), 4u);
  EXPECT_EQ(totals[0], allocs);
  EXPECT_EQ(totals[1], alloc_bytes);
  EXPECT_EQ(static_cast<std::uint64_t>(totals[3]), r.timeline.peak_allocated);
  EXPECT_GT(r.timeline.peak_allocated, 0u);

  // The stack holding most at the peak, frame by frame, innermost first.
  auto top = std::max_element(sp->samples.begin(), sp->samples.end(), [](const auto& a, const auto& b) {
    return a.inuse_bytes < b.inuse_bytes;
  });
  ASSERT_NE(top, sp->samples.end());
  const std::vector<std::string> frames = report::StackNames(*t, top->stack);
  ASSERT_FALSE(frames.empty());
  std::vector<std::int64_t> expected(4, 0);
  for (const report::StackSample& s : sp->samples) {
    if (report::StackNames(*t, s.stack) != frames) continue;
    expected[0] += s.allocs;
    expected[1] += s.alloc_bytes;
    expected[2] += s.inuse_blocks;
    expected[3] += s.inuse_bytes;
  }
  EXPECT_EQ(testing::ValuesOf(p, frames), expected);

  // The leak site holds memory at the peak.
  std::int64_t at_leak_site = 0;
  for (const auto& s : p.sample()) {
    for (const std::string& f : testing::Frames(p, s)) {
      if (f.find(GetParam().leak_site) != std::string::npos) {
        at_leak_site += s.value(3);
        break;
      }
    }
  }
  EXPECT_GT(at_leak_site, 0);
}

INSTANTIATE_TEST_SUITE_P(Bundled, PprofRealTrace,
                         ::testing::Values(RealTrace{"leaky_mlp.pickle.xz", "capture.py:78 leaky_mlp"},
                                           RealTrace{"leaky_mlp_pair.gpumem", "capture.py:107 leaky_mlp"}));

}  // namespace
}  // namespace gpumem::pprof
