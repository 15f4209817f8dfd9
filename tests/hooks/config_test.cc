#include "hooks/config.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace gpumem::hooks {
namespace {

absl::StatusOr<Config> Parse(const std::map<std::string, std::string>& vars) {
  return ParseConfig([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(ConfigTest, DefaultsWhenNothingIsSet) {
  absl::StatusOr<Config> c = Parse({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, BackendKind::kAuto);
  EXPECT_FALSE(c->capacity.has_value());
  EXPECT_FALSE(c->memory_fraction.has_value());
  EXPECT_TRUE(c->trace_path.empty());
  EXPECT_TRUE(c->log_oom);
  EXPECT_FALSE(c->verbose);
}

TEST(ConfigTest, ReadsEveryVariable) {
  absl::StatusOr<Config> c =
      Parse({{"GPUMEM_BACKEND", "cudamalloc"}, {"GPUMEM_CAPACITY", "1.5G"},
             {"GPUMEM_MEMORY_FRACTION", "0.25"}, {"GPUMEM_TRACE", "traces/x.gpumem"},
             {"GPUMEM_LOG_OOM", "0"}, {"GPUMEM_VERBOSE", "1"}, {"GPUMEM", "1"},
             {"GPUMEM_STITCH", "0"}, {"GPUMEM_BORROW", "0"}, {"GPUMEM_THREAD_CACHE", "0"},
             {"GPUMEM_PAGE_SIZE", "8M"}, {"GPUMEM_BACKGROUND_UNMAP", "0"},
             {"GPUMEM_MEDIUM_HEAP", "0"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, BackendKind::kCudaMalloc);
  EXPECT_EQ(*c->capacity, std::uint64_t{3} << 29);  // 1.5 * 2^30
  EXPECT_DOUBLE_EQ(*c->memory_fraction, 0.25);
  EXPECT_EQ(c->trace_path, "traces/x.gpumem");
  EXPECT_FALSE(c->log_oom);
  EXPECT_TRUE(c->verbose);
  EXPECT_FALSE(c->stitch);
  EXPECT_FALSE(c->borrow);
  EXPECT_EQ(c->page_bytes, std::uint64_t{8} << 20);
  EXPECT_EQ(Parse({})->page_bytes, 0u);
  EXPECT_TRUE(Parse({})->borrow);
  EXPECT_FALSE(c->medium_heap);
  EXPECT_TRUE(Parse({})->medium_heap);
  EXPECT_FALSE(c->background_unmap);
  EXPECT_TRUE(Parse({})->background_unmap);
  EXPECT_FALSE(c->thread_cache);
  EXPECT_TRUE(Parse({})->thread_cache);
  EXPECT_TRUE(Parse({{"GPUMEM_THREAD_CACHE", "1"}})->thread_cache);
}

TEST(ConfigTest, PageSizeAutoIsTheDefault) {
  for (const char* v : {"", "auto"}) {
    absl::StatusOr<Config> c = Parse({{"GPUMEM_PAGE_SIZE", v}});
    ASSERT_TRUE(c.ok()) << v << ": " << c.status();
    EXPECT_EQ(c->page_bytes, 0u) << v;  // 0: the device's default (allocator/page_size.h)
  }
  EXPECT_FALSE(Parse({{"GPUMEM_PAGE_SIZE", "automatic"}}).ok());
}

TEST(ConfigTest, ModeNames) {
  EXPECT_EQ(Parse({})->mode, Mode::kAllocator);
  EXPECT_EQ(Parse({{"GPUMEM_MODE", "allocator"}})->mode, Mode::kAllocator);
  EXPECT_EQ(Parse({{"GPUMEM_MODE", "profile"}})->mode, Mode::kProfile);
  EXPECT_EQ(Parse({{"GPUMEM_MODE", ""}})->mode, Mode::kAllocator);
}

TEST(ConfigTest, BackendNames) {
  EXPECT_EQ(Parse({{"GPUMEM_BACKEND", "vmm"}})->backend, BackendKind::kVmm);
  EXPECT_EQ(Parse({{"GPUMEM_BACKEND", "sim"}})->backend, BackendKind::kSim);
  EXPECT_EQ(Parse({{"GPUMEM_BACKEND", "auto"}})->backend, BackendKind::kAuto);
  EXPECT_EQ(Parse({{"GPUMEM_BACKEND", ""}})->backend, BackendKind::kAuto);
}

// Every bad value names its variable, the value, and what would have been accepted.
TEST(ConfigTest, BadValuesNameTheVariableAndTheAcceptedValues) {
  struct Case {
    const char* var;
    const char* value;
    const char* accepted;
  } cases[] = {
      {"GPUMEM_BACKEND", "cuda", "auto, vmm, cudamalloc or sim"},
      {"GPUMEM_MODE", "profiling", "allocator or profile"},
      {"GPUMEM_MODE", "PROFILE", "allocator or profile"},
      {"GPUMEM_CAPACITY", "lots", "a positive size"},
      {"GPUMEM_CAPACITY", "-5G", "a positive size"},
      {"GPUMEM_CAPACITY", "0", "a positive size"},
      {"GPUMEM_CAPACITY", "12X", "a positive size"},
      {"GPUMEM_HEADROOM", "lots", "0 or a size"},
      {"GPUMEM_HEADROOM", "-1G", "0 or a size"},
      {"GPUMEM_MEMORY_FRACTION", "1.5", "(0, 1]"},
      {"GPUMEM_MEMORY_FRACTION", "0", "(0, 1]"},
      {"GPUMEM_MEMORY_FRACTION", "half", "(0, 1]"},
      {"GPUMEM_LOG_OOM", "yes", "0 or 1"},
      {"GPUMEM_VERBOSE", "2", "0 or 1"},
      {"GPUMEM_STITCH", "no", "0 or 1"},
      {"GPUMEM_BORROW", "off", "0 or 1"},
      {"GPUMEM_MEDIUM_HEAP", "yes", "0 or 1"},
      {"GPUMEM_BACKGROUND_UNMAP", "yes", "0 or 1"},
      {"GPUMEM_PAGE_SIZE", "1M", "auto or a size from 2M to 1G"},
      {"GPUMEM_PAGE_SIZE", "4 pages", "from 2M to 1G"},
      {"GPUMEM_THREAD_CACHE", "on", "0 or 1"},
      {"GPUMEM", "true", "0 or 1"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Config> config = Parse({{c.var, c.value}});
    ASSERT_FALSE(config.ok()) << c.var << "=" << c.value;
    EXPECT_TRUE(absl::IsInvalidArgument(config.status()));
    std::string message(config.status().message());
    EXPECT_NE(message.find(std::string(c.var) + "='" + c.value + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find(c.accepted), std::string::npos) << message;
  }
}

TEST(ConfigTest, HeadroomDefaultsTo512MiBOnADeviceAndNothingOnTheSimulation) {
  absl::StatusOr<Config> unset = Parse({});
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(HeadroomFor(*unset, /*simulated=*/false), std::uint64_t{512} << 20);
  EXPECT_EQ(HeadroomFor(*unset, /*simulated=*/true), 0u);
  absl::StatusOr<Config> set = Parse({{"GPUMEM_HEADROOM", "1G"}});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(HeadroomFor(*set, /*simulated=*/true), std::uint64_t{1} << 30);
  absl::StatusOr<Config> off = Parse({{"GPUMEM_HEADROOM", "0"}});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(HeadroomFor(*off, /*simulated=*/false), 0u);
}

TEST(ConfigTest, ParseBytesUnits) {
  EXPECT_EQ(*ParseBytes("512"), 512u);
  EXPECT_EQ(*ParseBytes("64K"), 65536u);
  EXPECT_EQ(*ParseBytes("64k"), 65536u);
  EXPECT_EQ(*ParseBytes("2M"), 2u << 20);
  EXPECT_EQ(*ParseBytes("2MiB"), 2u << 20);
  EXPECT_EQ(*ParseBytes("2MB"), 2u << 20);
  EXPECT_EQ(*ParseBytes("80GiB"), std::uint64_t{80} << 30);
  EXPECT_EQ(*ParseBytes(" 1T "), std::uint64_t{1} << 40);
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("G").ok());
  EXPECT_FALSE(ParseBytes("1e30").ok());
  EXPECT_FALSE(ParseBytes("nan").ok());
}

TEST(ConfigTest, TraceMaxIsASizeOfAtLeast16MiB) {
  EXPECT_EQ(Parse({})->trace_max_bytes, 0u);
  EXPECT_EQ(Parse({{"GPUMEM_TRACE_MAX", "256M"}})->trace_max_bytes, std::uint64_t{256} << 20);
  EXPECT_EQ(Parse({{"GPUMEM_TRACE_MAX", "2G"}})->trace_max_bytes, std::uint64_t{2} << 30);
  for (const char* bad : {"abc", "0", "-5", "1M", "8M", "16777215", "2Q", "nan"}) {
    absl::StatusOr<Config> c = Parse({{"GPUMEM_TRACE_MAX", bad}});
    ASSERT_FALSE(c.ok()) << bad;
    const std::string m(c.status().message());
    EXPECT_NE(m.find("GPUMEM_TRACE_MAX='" + std::string(bad) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("at least 16M"), std::string::npos) << m;
  }
}

TEST(ConfigTest, EveryVariableIsListedOnce) {
  std::map<std::string, int> seen;
  for (int i = 0; i < kConfigVariableCount; ++i) ++seen[kConfigVariables[i].name];
  for (const char* name : {"GPUMEM", "GPUMEM_MODE", "GPUMEM_BACKEND", "GPUMEM_CAPACITY",
                           "GPUMEM_MEMORY_FRACTION", "GPUMEM_TRACE", "GPUMEM_LOG_OOM",
                           "GPUMEM_VERBOSE", "GPUMEM_STITCH", "GPUMEM_BORROW", "GPUMEM_PAGE_SIZE",
                           "GPUMEM_THREAD_CACHE", "GPUMEM_BACKGROUND_UNMAP", "GPUMEM_MEDIUM_HEAP",
                           "GPUMEM_TRACE_MAX"}) {
    EXPECT_EQ(seen[name], 1) << name;
  }
  EXPECT_EQ(static_cast<int>(seen.size()), kConfigVariableCount);
}

}  // namespace
}  // namespace gpumem::hooks
