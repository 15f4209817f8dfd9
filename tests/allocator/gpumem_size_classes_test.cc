#include "allocator/size_classes.h"

#include <gtest/gtest.h>

namespace gpumem {
namespace {

TEST(SizeClassesTest, EveryRequestFitsItsClassWithBoundedWaste) {
  int previous = 0;
  for (std::size_t bytes = 1; bytes <= kSmallLimit; bytes += (bytes < 20000 ? 1 : 97)) {
    const int c = SizeClasses::ClassOf(bytes);
    ASSERT_GE(c, 0);
    ASSERT_LT(c, SizeClasses::kCount);
    ASSERT_GE(c, previous) << "classes must grow with the request, at " << bytes;
    previous = c;
    const std::size_t size = SizeClasses::ClassSize(c);
    ASSERT_GE(size, bytes);
    ASSERT_EQ(size % kBlockAlign, 0u);
    const std::size_t rounded = (bytes + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
    // Above the linear part a class is at most 1/16 larger than the rounded request.
    if (rounded > SizeClasses::kLinearLimit) {
      ASSERT_LE(size * 16, rounded * 17) << bytes;
    } else {
      ASSERT_EQ(size, rounded) << bytes;
    }
  }
  EXPECT_EQ(SizeClasses::ClassOf(kSmallLimit), SizeClasses::kCount - 1);
  EXPECT_EQ(SizeClasses::ClassOf(0), 0);
}

TEST(SizeClassesTest, ClassSizesAreTheirOwnClassAndStrictlyIncreasing) {
  for (int c = 0; c < SizeClasses::kCount; ++c) {
    EXPECT_EQ(SizeClasses::ClassOf(SizeClasses::ClassSize(c)), c);
    if (c > 0) {
      EXPECT_GT(SizeClasses::ClassSize(c), SizeClasses::ClassSize(c - 1));
    }
    EXPECT_GE(SizeClasses::SlabCount(c), 1u);
    EXPECT_EQ(SizeClasses::SlabBytes(c), SizeClasses::SlabCount(c) * SizeClasses::ClassSize(c));
  }
  EXPECT_EQ(SizeClasses::ClassSize(SizeClasses::kCount - 1), kSmallLimit);
  // Common tensor sizes are classes of their own: no waste for them.
  for (std::size_t exact : {512u, 1024u, 1536u, 3072u, 4096u, 24576u, 65536u, 786432u}) {
    EXPECT_EQ(SizeClasses::ClassSize(SizeClasses::ClassOf(exact)), exact);
  }
}

}  // namespace
}  // namespace gpumem
