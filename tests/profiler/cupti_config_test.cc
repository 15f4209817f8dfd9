// The CUPTI tracer's configuration from the environment: under GPUMEM_TRACE_MAX its
// companion trace is a ring within max(SIZE / 16, 16M) (profiler/trace_max.h), and a bad
// value is refused with the message libgpumem.so gives; the tracer itself, loaded as the
// CUDA driver loads it, says so and does not trace (no GPU needed: it stops before CUPTI).
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "profiler/cupti/tracer_options.h"
#include "profiler/trace_max.h"
#include "tests/profiler/trace_test_util.h"

namespace gpumem::cupti {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

class CuptiConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("GPUMEM_TRACE", "out/run-0.gpumem", 1);
    unsetenv("GPUMEM_CUPTI_TRACE");
    unsetenv("GPUMEM_TRACE_MAX");
  }
  void TearDown() override {
    unsetenv("GPUMEM_TRACE");
    unsetenv("GPUMEM_TRACE_MAX");
  }
  static absl::StatusOr<RecorderOptions> WithTraceMax(const char* value) {
    setenv("GPUMEM_TRACE_MAX", value, 1);
    return TracerOptionsFromEnvironment();
  }
};

TEST_F(CuptiConfigTest, CompanionIsARingWithinASixteenthOfTraceMaxAtLeast16M) {
  absl::StatusOr<RecorderOptions> unbounded = TracerOptionsFromEnvironment();
  ASSERT_TRUE(unbounded.ok()) << unbounded.status();
  EXPECT_EQ(unbounded->trace_max_bytes, 0u);
  EXPECT_EQ(unbounded->path, "out/run-0.cupti.gpumem");
  EXPECT_EQ(unbounded->writer.header.at("source"), "cupti");
  EXPECT_EQ(WithTraceMax("16M")->trace_max_bytes, 16 * kMiB);
  EXPECT_EQ(WithTraceMax("256M")->trace_max_bytes, 16 * kMiB);
  EXPECT_EQ(WithTraceMax("1G")->trace_max_bytes, 64 * kMiB);
  EXPECT_EQ(WithTraceMax("2G")->trace_max_bytes, 128 * kMiB);
  EXPECT_EQ(WithTraceMax("")->trace_max_bytes, 0u);
  EXPECT_EQ(CuptiTraceMax(0), 0u);
}

TEST_F(CuptiConfigTest, BadTraceMaxIsRefusedAsLibgpumemRefusesIt) {
  for (const char* bad : {"12x", "1M", "0", "-256M", "G"}) {
    absl::StatusOr<RecorderOptions> options = WithTraceMax(bad);
    ASSERT_FALSE(options.ok()) << bad;
    EXPECT_EQ(options.status().message(),
              "GPUMEM_TRACE_MAX='" + std::string(bad) +
                  "': expected a size of at least 16M, such as 256M or 2G");
  }
}

#ifdef GPUMEM_CUPTI_LIBRARY
// What `fn` writes to stderr.
template <typename Fn>
std::string Stderr(Fn fn) {
  const std::string path = gpumem::testing::TempPath("cupti_config_stderr");
  const int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const int saved = dup(STDERR_FILENO);
  dup2(file, STDERR_FILENO);
  fn();
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(file);
  const std::string text = gpumem::testing::ReadBytes(path);
  std::remove(path.c_str());
  return text;
}

TEST_F(CuptiConfigTest, TracerWithBadTraceMaxSaysSoAndDoesNotTrace) {
  setenv("GPUMEM_TRACE_MAX", "12x", 1);
  void* library = dlopen(GPUMEM_CUPTI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  using Initialize = int (*)();
  const auto initialize = reinterpret_cast<Initialize>(dlsym(library, "InitializeInjection"));
  ASSERT_NE(initialize, nullptr);
  const std::string said = Stderr([&] { EXPECT_EQ(initialize(), 1); });
  EXPECT_EQ(said,
            "gpumem-cupti: GPUMEM_TRACE_MAX='12x': expected a size of at least 16M, such as "
            "256M or 2G; not tracing\n");
}
#endif

}  // namespace
}  // namespace gpumem::cupti
