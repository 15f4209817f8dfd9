// The verdict at an out-of-memory without a trace: no sites, so the class comes from the
// allocator's figures and the growth of its total at step marks, with the hint that
// GPUMEM_TRACE would name the site.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"

namespace gpumem::hooks {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

class Environment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("GPUMEM_BACKEND", "sim", 1);
    unsetenv("GPUMEM_TRACE");
    ResetRegistryForTesting();
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new Environment);

TEST(OomVerdictUntracedTest, LeakFromTheTotalsGrowth) {
  ASSERT_EQ(gpumem_set_capacity(64 * kMiB, 0), 0);
  std::vector<void*> kept;
  ::testing::internal::CaptureStderr();
  for (int step = 0; step < 100; ++step) {
    void* p = gpumem_alloc(2 * kMiB, 0, nullptr);
    if (p == nullptr) break;
    kept.push_back(p);
    gpumem_step();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (void* p : kept) gpumem_free(p, 0, 0, nullptr);
  EXPECT_NE(err.find("verdict: leak"), std::string::npos) << err;
  EXPECT_NE(err.find("grew by 2.00 MiB per step"), std::string::npos) << err;
  EXPECT_NE(err.find("GPUMEM_TRACE=<file>"), std::string::npos) << err;
  EXPECT_EQ(err.find("leak warning"), std::string::npos) << err;  // needs a trace
}

TEST(OomVerdictUntracedTest, TooBigRequestIsGenuinePeak) {
  gpumem_step();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_alloc(1 << 30, 0, nullptr), nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("verdict: genuine peak"), std::string::npos) << err;
  EXPECT_NE(err.find("GPUMEM_TRACE=<file>"), std::string::npos) << err;
}

}  // namespace
}  // namespace gpumem::hooks
