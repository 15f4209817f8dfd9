#include "allocator/free_index.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <set>
#include <utility>

#include "allocator/large_pool.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

TEST(FreeIndexTest, ListsAreOrderedBySize) {
  // A larger size never maps to an earlier list, so "first non-empty list at or after"
  // never skips a fit; sizes at the 1 MiB edge land on both sides of it.
  std::size_t last = 0;
  for (std::size_t s = kBlockAlign; s <= 64 * kMiB; s += kBlockAlign) {
    const std::size_t i = FreeIndex::ListOf(s);
    ASSERT_GE(i, last) << s;
    last = i;
  }
  EXPECT_EQ(FreeIndex::ListOf(kMiB), FreeIndex::kExactLists - 1);
  EXPECT_EQ(FreeIndex::ListOf(kMiB + kBlockAlign), FreeIndex::kExactLists);
  EXPECT_LT(FreeIndex::ListOf(std::size_t{1} << 62), FreeIndex::kLists);
  EXPECT_LT(FreeIndex::ListOf(~std::size_t{0} / kBlockAlign * kBlockAlign), FreeIndex::kLists);
}

TEST(FreeIndexTest, EmptyIndexFindsNothing) {
  FreeIndex index;
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.BestFit(kBlockAlign), nullptr);
  EXPECT_EQ(index.Largest(), nullptr);
  EXPECT_TRUE(index.Sorted().empty());
}

// Random inserts, erases and queries against a std::set of (size, addr): best fit is the
// smallest size of at least the request (above the exact lists: also the lowest address),
// the largest matches, and Sorted() is the set's order.
TEST(FreeIndexTest, MatchesSortedReference) {
  std::mt19937_64 rng(7);
  std::deque<Block> blocks;
  std::set<std::pair<std::size_t, DevicePtr>> ref;
  std::vector<Block*> in;
  FreeIndex index;
  auto random_size = [&] {
    // Mostly around the exact/class edge and a few huge ones.
    switch (rng() % 4) {
      case 0: return (1 + rng() % 64) * kBlockAlign;
      case 1: return (1 + rng() % 4096) * kBlockAlign;
      case 2: return (1 + rng() % (256 * 2048)) * kBlockAlign;
      default: return (std::size_t{1} << (20 + rng() % 30)) + (rng() % 8) * kBlockAlign;
    }
  };
  for (int op = 0; op < 200000; ++op) {
    const unsigned r = rng() % 10;
    if (r < 4 || in.empty()) {
      Block& b = blocks.emplace_back();
      b.size = random_size();
      b.addr = blocks.size() * 4096;
      index.Insert(&b);
      ref.insert({b.size, b.addr});
      in.push_back(&b);
    } else if (r < 7) {
      const std::size_t k = rng() % in.size();
      Block* b = in[k];
      index.Erase(b);
      ref.erase({b->size, b->addr});
      in[k] = in.back();
      in.pop_back();
    } else {
      const std::size_t want = random_size();
      Block* got = index.BestFit(want);
      auto it = ref.lower_bound({want, 0});
      if (it == ref.end()) {
        ASSERT_EQ(got, nullptr) << want;
        continue;
      }
      ASSERT_NE(got, nullptr) << want;
      ASSERT_EQ(got->size, it->first) << want;
      if (got->size > FreeIndex::kExactLimit) {
        ASSERT_EQ(got->addr, it->second);
      }
    }
    ASSERT_EQ(index.size(), ref.size());
    if (!ref.empty()) {
      ASSERT_EQ(index.Largest()->size, ref.rbegin()->first);
    }
  }
  std::vector<Block*> sorted = index.Sorted();
  ASSERT_EQ(sorted.size(), ref.size());
  auto it = ref.begin();
  for (Block* b : sorted) {
    EXPECT_EQ(std::make_pair(b->size, b->addr), *it++);
  }
}

}  // namespace
}  // namespace gpumem
