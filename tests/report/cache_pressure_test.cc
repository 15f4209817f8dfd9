// A run that lived with its cache pressed against the cap by pieces: said, with the fix;
// not where the cache stayed near what was allocated, stayed far from the cap, or the
// run died of memory (its OOM is explained instead).
#include "tools/report/cache_pressure.h"

#include <string>

#include "gtest/gtest.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/report/synthetic_builder.h"

namespace gpumem::report {
namespace {

using synthetic::kMiB;

// Steps of one 64 MiB block freed each step, among the `segments` MiB cached in 32 MiB
// segments (kCapacity: 1024 MiB); `live` MiB allocated and kept from the start. The same
// on each of `devices` devices.
trace::Trace CachedRun(std::uint64_t segments, std::uint64_t live, int devices = 1) {
  synthetic::Builder b;
  const std::uint32_t model = b.Stack(10, "build_model");
  const std::uint32_t step = b.Stack(20, "train");
  const std::uint64_t base = 1ull << 40;
  for (int d = 0; d < devices; ++d) {
    b.OnDevice(d);
    for (std::uint64_t s = 0; s < segments / 32; ++s) b.Segment(base + s * 32 * kMiB, 32 * kMiB);
    b.Alloc(base, live * kMiB, model);
  }
  for (int i = 0; i < 20; ++i) {
    for (int d = 0; d < devices; ++d) {
      b.OnDevice(d);
      b.Alloc(base + live * kMiB, 64 * kMiB, step);
      b.Free(base + live * kMiB, 64 * kMiB, step);
    }
    b.OnDevice(0);
    b.Step();
  }
  return b.Take();
}

TEST(CachePressure, ACacheOfPiecesAgainstTheCapIsSaidWithTheFix) {
  const trace::Trace t = CachedRun(960, 500);
  const Report r = BuildReport(t, {});
  ASSERT_TRUE(r.cache_pressure.has_value());
  EXPECT_NEAR(r.cache_pressure->ratio(), 960.0 / 564, 0.01);
  const std::string text = CachePressureText(*r.cache_pressure);
  EXPECT_NE(text.find("960.00 MiB, 1.70x the most ever allocated at once (564.00 MiB) and 94% "
                      "of the cap (1.00 GiB)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("expandable_segments:True"), std::string::npos) << text;
}

TEST(CachePressure, NotSaidFarFromTheCapNorNearWhatWasAllocated) {
  const trace::Trace far = CachedRun(640, 300), near = CachedRun(960, 880);
  EXPECT_FALSE(BuildReport(far, {}).cache_pressure.has_value());   // 63% of the cap
  EXPECT_FALSE(BuildReport(near, {}).cache_pressure.has_value());  // 1.02x
}

// Each of two devices held 544 MiB of its 1 GiB: no cap was pressed, though both
// together held more than one device's cap. Pressed on one of them, it is said of it.
TEST(CachePressure, JudgedDeviceByDevice) {
  const trace::Trace two = CachedRun(544, 280, 2);
  EXPECT_FALSE(BuildReport(two, {}).cache_pressure.has_value());
  const trace::Trace pressed = CachedRun(960, 500, 2);
  const Report r = BuildReport(pressed, {});
  ASSERT_TRUE(r.cache_pressure.has_value());
  EXPECT_EQ(r.cache_pressure->peak_reserved, 960 * kMiB);
  EXPECT_NE(CachePressureText(*r.cache_pressure).find("reserved up to 960.00 MiB on device 0,"),
            std::string::npos) << CachePressureText(*r.cache_pressure);
}

TEST(CachePressure, NotSaidWhereTheRunDiedOfMemory) {
  trace::Trace t = CachedRun(960, 500);
  trace::Event oom;
  oom.action = trace::Action::kOom;
  oom.size = 128 * kMiB;
  oom.time_us = t.events.back().time_us + 10;
  t.events.push_back(oom);
  EXPECT_FALSE(BuildReport(t, {}).cache_pressure.has_value());
}

}  // namespace
}  // namespace gpumem::report
