// PrefetchForWrite's processor check agrees with the kernel's view of the processor, so
// the journal's slots are asked for with PREFETCHW wherever the processor lists it, and
// with a plain prefetch elsewhere.
#include "profiler/prefetch_for_write.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace gpumem {
namespace {

// The "flags" line of /proc/cpuinfo as words, or "" where there is none.
std::string CpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return " " + line.substr(line.find(':') + 1) + " ";
  }
  return "";
}

TEST(PrefetchForWriteTest, DetectionAgreesWithTheKernel) {
#if defined(__x86_64__)
  const std::string flags = CpuFlags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  // Linux names CPUID 0x80000001 ECX bit 8 "3dnowprefetch".
  EXPECT_EQ(kHasPrefetchW, flags.find(" 3dnowprefetch ") != std::string::npos) << flags;
#else
  EXPECT_FALSE(kHasPrefetchW);
#endif
}

TEST(PrefetchForWriteTest, LeavesMemoryAsItWas) {
  alignas(64) char line[128] = {1, 2, 3};
  PrefetchForWrite(line);
  PrefetchForWrite(line + 64);
  EXPECT_EQ(line[0] + line[1] + line[2], 6);
}

}  // namespace
}  // namespace gpumem
