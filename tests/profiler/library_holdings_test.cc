// What the CUPTI tracer counts as held by this process's own libraries outside the
// allocator, per device, library and site: what the dying process adds to other
// processes' memory, and watches grow.
#include "profiler/library_holdings.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpumem {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr auto kOther = report::OutsideLibrary::kOther;
constexpr auto kNccl = report::OutsideLibrary::kNccl;

TEST(LibraryHoldings, CountsByDeviceAndNamesTheSiteHoldingMost) {
  LibraryHoldings h;
  EXPECT_EQ(h.Bytes(0, kOther), 0u);
  EXPECT_EQ(h.TopSite(0, kOther), "");
  EXPECT_EQ(h.Devices(), 0u);
  h.OnAlloc(0x1000, 1, kOther, 256 * kMiB, "ext.py:12 grow");
  h.OnAlloc(0x2000, 1, kOther, 64 * kMiB, "ext.py:30 scratch");
  h.OnAlloc(0x3000, 1, kOther, 256 * kMiB, "ext.py:12 grow");
  h.OnAlloc(0x4000, 3, kOther, 8 * kMiB, "other.py:1 f");
  EXPECT_EQ(h.Bytes(1, kOther), 576 * kMiB);
  EXPECT_EQ(h.Bytes(3, kOther), 8 * kMiB);
  EXPECT_EQ(h.Bytes(0, kOther), 0u);
  EXPECT_EQ(h.TopSite(1, kOther), "ext.py:12 grow");
  EXPECT_EQ(h.TopSite(3, kOther), "other.py:1 f");
  EXPECT_EQ(h.Devices(), (1u << 1) | (1u << 3));

  h.OnFree(0x1000);
  h.OnFree(0x3000);
  h.OnFree(0xdead);  // never counted: ignored
  EXPECT_EQ(h.Bytes(1, kOther), 64 * kMiB);
  EXPECT_EQ(h.TopSite(1, kOther), "ext.py:30 scratch");
  h.OnFree(0x2000);
  EXPECT_EQ(h.Bytes(1, kOther), 0u);
  EXPECT_EQ(h.TopSite(1, kOther), "");
  EXPECT_EQ(h.Devices(), (1u << 1) | (1u << 3));  // ever held
}

// NCCL's memory and an extension's on one device are counted apart.
TEST(LibraryHoldings, EachLibraryIsCountedApart) {
  LibraryHoldings h;
  h.OnAlloc(0x1000, 0, kNccl, 400 * kMiB, "train.py:9 main");
  h.OnAlloc(0x2000, 0, kOther, 64 * kMiB, "ext.py:3 grow");
  h.OnAlloc(0x3000, 0, kNccl, 400 * kMiB, "train.py:9 main");
  EXPECT_EQ(h.Bytes(0, kNccl), 800 * kMiB);
  EXPECT_EQ(h.Bytes(0, kOther), 64 * kMiB);
  EXPECT_EQ(h.Bytes(0, report::OutsideLibrary::kCublas), 0u);
  EXPECT_EQ(h.TopSite(0, kNccl), "train.py:9 main");
  EXPECT_EQ(h.TopSite(0, kOther), "ext.py:3 grow");
  h.OnFree(0x1000);
  EXPECT_EQ(h.Bytes(0, kNccl), 400 * kMiB);
  EXPECT_EQ(h.Bytes(0, kOther), 64 * kMiB);
}

// A library's own threads (NCCL's proxy) name no line: their memory counts, their empty
// site is never the top one.
TEST(LibraryHoldings, MemoryOfALibrarysOwnThreadsCountsButNamesNoSite) {
  LibraryHoldings h;
  h.OnAlloc(0x1000, 0, kNccl, 700 * kMiB, "");
  EXPECT_EQ(h.TopSite(0, kNccl), "");
  h.OnAlloc(0x2000, 0, kNccl, 100 * kMiB, "train.py:9 main");
  EXPECT_EQ(h.Bytes(0, kNccl), 800 * kMiB);
  EXPECT_EQ(h.TopSite(0, kNccl), "train.py:9 main");
}

// The driver hands an address out again after a free the tracer did not see (a free
// through a path CUPTI does not report): the new block replaces the old one.
TEST(LibraryHoldings, AnAddressHandedOutAgainReplacesItsBlock) {
  LibraryHoldings h;
  h.OnAlloc(0x1000, 0, kOther, 100 * kMiB, "a.py:1 f");
  h.OnAlloc(0x1000, 0, kOther, 30 * kMiB, "b.py:2 g");
  EXPECT_EQ(h.Bytes(0, kOther), 30 * kMiB);
  EXPECT_EQ(h.TopSite(0, kOther), "b.py:2 g");
}

// Driver calls come from any thread (NCCL's proxy, a DataLoader's pinning thread).
TEST(LibraryHoldings, ThreadsCountTogether) {
  LibraryHoldings h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (std::uint64_t i = 0; i < 1000; ++i) {
        const std::uint64_t key = (static_cast<std::uint64_t>(t) << 32) | i;
        h.OnAlloc(key, 2, kOther, kMiB, "t.py:1 f");
        if (i % 2 == 0) h.OnFree(key);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(h.Bytes(2, kOther), 4 * 500 * kMiB);
}

}  // namespace
}  // namespace gpumem
