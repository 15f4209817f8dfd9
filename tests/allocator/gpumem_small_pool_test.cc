#include "allocator/small_pool.h"

#include <set>

#include <gtest/gtest.h>

namespace gpumem {
namespace {

TEST(SmallPoolTest, SlabSlotsAreDistinctAndReused) {
  SmallPool pool;
  const int c = SizeClasses::ClassOf(3000);  // 3072-byte slots
  Slab* s = nullptr;
  EXPECT_EQ(pool.Allocate(c, &s), 0u);  // no slab yet
  Block backing;
  backing.addr = 1 << 20;
  backing.size = SizeClasses::SlabBytes(c);
  pool.AddSlab(c, &backing);
  std::set<DevicePtr> seen;
  std::vector<std::pair<DevicePtr, Slab*>> got;
  for (std::size_t i = 0; i < SizeClasses::SlabCount(c); ++i) {
    DevicePtr p = pool.Allocate(c, &s);
    ASSERT_NE(p, 0u);
    EXPECT_TRUE(seen.insert(p).second);
    EXPECT_GE(p, backing.addr);
    EXPECT_LE(p + SizeClasses::ClassSize(c), backing.end());
    EXPECT_EQ((p - backing.addr) % SizeClasses::ClassSize(c), 0u);
    got.emplace_back(p, s);
  }
  EXPECT_EQ(pool.Allocate(c, &s), 0u);  // full
  pool.Free(got[3].second, got[3].first);
  EXPECT_EQ(pool.Allocate(c, &s), got[3].first);  // the freed slot, at once
  int released = 0;
  EXPECT_EQ(pool.ReleaseEmpty([&](Block*) { ++released; }), 0u);  // slab in use
  for (auto& [p, slab] : got) pool.Free(slab, p);
  EXPECT_EQ(pool.ReleaseEmpty([&](Block* b) {
    EXPECT_EQ(b, &backing);
    ++released;
  }), 1u);
  EXPECT_EQ(released, 1);
  EXPECT_EQ(pool.slab_count(), 0u);
  EXPECT_EQ(pool.Allocate(c, &s), 0u);
}

}  // namespace
}  // namespace gpumem
