#include "tools/report/perfetto_export.h"

#include "gtest/gtest.h"
#include "tools/report/synthetic.h"

namespace gpumem::report {
namespace {

// The leak trace's figures follow from how it is built (synthetic.h): 128 MiB of
// parameters + 256 MiB of activations + 16 MiB per step, full at 1 GiB.
TEST(PerfettoExport, CountersStepsAndOom) {
  trace::Trace t = synthetic::LeakTrace();
  Steps steps = FindSteps(t, std::nullopt);
  nlohmann::json j = ExportPerfetto(t, steps, 50);  // few points: peaks must survive
  std::uint64_t max_allocated = 0, max_reserved = 0;
  std::size_t step_marks = 0, ooms = 0, counters = 0;
  for (const nlohmann::json& e : j["traceEvents"]) {
    if (e["ph"] == "C") {
      ++counters;
      max_allocated = std::max<std::uint64_t>(max_allocated, e["args"]["allocated"]);
      max_reserved = std::max<std::uint64_t>(max_reserved, e["args"]["reserved"]);
    } else if (e["ph"] == "i" && e["name"] == "OOM") {
      ++ooms;
      EXPECT_EQ(e["args"]["requested"], synthetic::kLeakPerStep);
    } else if (e["ph"] == "i") {
      ++step_marks;
    }
  }
  EXPECT_LE(counters, 51u);
  EXPECT_EQ(ooms, 1u);
  EXPECT_EQ(step_marks, 40u);  // 40 complete steps before the OOM in step 41
  EXPECT_EQ(max_reserved, synthetic::kCapacity);
  EXPECT_EQ(max_allocated, synthetic::kCapacity);  // reserved is all in use at the OOM
}

}  // namespace
}  // namespace gpumem::report
