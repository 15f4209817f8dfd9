// What the CUPTI tracer counts as held by this process's own unusual libraries, per
// device and by site: what the dying process adds to other processes' memory.
#include "profiler/library_holdings.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpumem {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

TEST(LibraryHoldings, CountsByDeviceAndNamesTheSiteHoldingMost) {
  LibraryHoldings h;
  EXPECT_EQ(h.Bytes(0), 0u);
  EXPECT_EQ(h.TopSite(0), "");
  EXPECT_EQ(h.Devices(), 0u);
  h.OnAlloc(0x1000, 1, 256 * kMiB, "ext.py:12 grow");
  h.OnAlloc(0x2000, 1, 64 * kMiB, "ext.py:30 scratch");
  h.OnAlloc(0x3000, 1, 256 * kMiB, "ext.py:12 grow");
  h.OnAlloc(0x4000, 3, 8 * kMiB, "other.py:1 f");
  EXPECT_EQ(h.Bytes(1), 576 * kMiB);
  EXPECT_EQ(h.Bytes(3), 8 * kMiB);
  EXPECT_EQ(h.Bytes(0), 0u);
  EXPECT_EQ(h.TopSite(1), "ext.py:12 grow");
  EXPECT_EQ(h.TopSite(3), "other.py:1 f");
  EXPECT_EQ(h.Devices(), (1u << 1) | (1u << 3));

  h.OnFree(0x1000);
  h.OnFree(0x3000);
  h.OnFree(0xdead);  // never counted: ignored
  EXPECT_EQ(h.Bytes(1), 64 * kMiB);
  EXPECT_EQ(h.TopSite(1), "ext.py:30 scratch");
  h.OnFree(0x2000);
  EXPECT_EQ(h.Bytes(1), 0u);
  EXPECT_EQ(h.TopSite(1), "");
  EXPECT_EQ(h.Devices(), (1u << 1) | (1u << 3));  // ever held
}

// The driver hands an address out again after a free the tracer did not see (a free
// through a path CUPTI does not report): the new block replaces the old one.
TEST(LibraryHoldings, AnAddressHandedOutAgainReplacesItsBlock) {
  LibraryHoldings h;
  h.OnAlloc(0x1000, 0, 100 * kMiB, "a.py:1 f");
  h.OnAlloc(0x1000, 0, 30 * kMiB, "b.py:2 g");
  EXPECT_EQ(h.Bytes(0), 30 * kMiB);
  EXPECT_EQ(h.TopSite(0), "b.py:2 g");
}

// Driver calls come from any thread (NCCL's proxy, a DataLoader's pinning thread).
TEST(LibraryHoldings, ThreadsCountTogether) {
  LibraryHoldings h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (std::uint64_t i = 0; i < 1000; ++i) {
        const std::uint64_t key = (static_cast<std::uint64_t>(t) << 32) | i;
        h.OnAlloc(key, 2, kMiB, "t.py:1 f");
        if (i % 2 == 0) h.OnFree(key);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(h.Bytes(2), 4 * 500 * kMiB);
}

}  // namespace
}  // namespace gpumem
