// Randomized model check of the gpumem policy (tests/allocator/gpumem_model_check.h):
// 500 sequences of 200 steps on each backend kind and cap. Other seeds without a rebuild:
// GPUMEM_MODEL_SEED (the first seed) in the environment.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "tests/allocator/gpumem_model_check.h"

namespace gpumem {
namespace {

using testing::ModelCheck;

int FirstSeed() {
  const char* v = std::getenv("GPUMEM_MODEL_SEED");
  return v != nullptr && *v != '\0' ? std::atoi(v) : 1000;
}

struct Config {
  bool vmm;
  std::uint64_t capacity;
  bool background = false;  // lent pages unmapped on the allocator's thread
};

class GpumemModelCheckTest : public ::testing::TestWithParam<Config> {};

TEST_P(GpumemModelCheckTest, RandomSequencesKeepEveryInvariant) {
  constexpr int kSequences = 500;
  constexpr int kSteps = 200;
  int ooms = 0;
  int cached = 0;
  std::uint64_t lends = 0;
  std::uint64_t borrows = 0;
  std::uint64_t off_thread_unmaps = 0;
  for (int seq = 0; seq < kSequences; ++seq) {
    ModelCheck m(static_cast<std::uint32_t>(FirstSeed() + seq), GetParam().vmm,
                 GetParam().capacity, {}, GetParam().background);
    for (int i = 0; i < kSteps; ++i) {
      m.Step();
      if (::testing::Test::HasFatalFailure()) {
        FAIL() << "sequence " << seq << " (seed " << FirstSeed() + seq << "), step " << i;
      }
    }
    m.FinishAndCheckEmpty();
    ooms += m.ooms();
    cached += m.cached_seen();
    lends += m.cross_stream_lends();
    borrows += m.cross_stream_borrows();
    off_thread_unmaps += m.off_thread_unmaps();
  }
  if (GetParam().background) {
    EXPECT_GT(off_thread_unmaps, 0u) << "no page was unmapped on the allocator's thread";
  } else {
    EXPECT_EQ(off_thread_unmaps, 0u);
  }
  EXPECT_GT(cached, 0) << "the thread cache was never used";
  EXPECT_GT(borrows, 0u) << "no stream took another stream's free block";
  // Under the small cap the check must also have exercised the OOM path and, with VMM,
  // stitches of another stream's pages (a stream wait).
  if (GetParam().capacity < (std::uint64_t{1} << 30)) {
    EXPECT_GT(ooms, 0);
    if (GetParam().vmm) {
      EXPECT_GT(lends, 0u) << "no stream was made to wait";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, GpumemModelCheckTest,
    ::testing::Values(Config{true, std::uint64_t{8} << 30}, Config{true, std::uint64_t{96} << 20},
                      Config{true, std::uint64_t{96} << 20, /*background=*/true},
                      Config{false, std::uint64_t{8} << 30}, Config{false, std::uint64_t{96} << 20}),
    [](const auto& p) {
      return std::string(p.param.vmm ? "Vmm" : "Segments") +
             (p.param.capacity < (std::uint64_t{1} << 30) ? "SmallCap" : "LargeCap") +
             (p.param.background ? "BackgroundUnmap" : "");
    });

}  // namespace
}  // namespace gpumem
