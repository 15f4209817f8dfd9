// The class map of the small pool: every request of at most kSmallLimit bytes is served
// from a slab of one size class. Classes are 512 B apart up to 8 KiB, then 16 per
// doubling, so a block is never more than 1/16 (6.25 %) larger than its rounded request.
#pragma once

#include <bit>
#include <cstddef>

namespace gpumem {

// `n` rounded up to a multiple of `to` (a page, a granule, kBlockAlign).
inline constexpr std::size_t RoundUp(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

inline constexpr std::size_t kBlockAlign = 512;  // every block address and size (cudaMalloc's)
inline constexpr std::size_t kSmallLimit = std::size_t{1} << 20;  // 1 MiB: larger is "large"

class SizeClasses {
 public:
  static constexpr int kCount = 128;
  static constexpr std::size_t kLinearLimit = 8192;  // classes 512 B apart up to here
  // Bytes a slab of any class aims for: small enough that a half-used slab wastes little.
  static constexpr std::size_t kSlabTarget = std::size_t{128} << 10;

  // The class of a request of 1..kSmallLimit bytes (0 is treated as 1).
  static int ClassOf(std::size_t bytes) {
    std::size_t r = bytes == 0 ? kBlockAlign : (bytes + kBlockAlign - 1) & ~(kBlockAlign - 1);
    if (r <= kLinearLimit) return static_cast<int>(r / kBlockAlign) - 1;
    // r-1 = m << shift with m in [16, 32): the class is (m+1) << shift.
    std::size_t x = r - 1;
    int top = std::bit_width(x) - 1;  // >= 13
    int shift = top - 4;
    int m = static_cast<int>(x >> shift);
    return 16 + (top - 13) * 16 + (m - 16);
  }

  // The block size of class `c`.
  static std::size_t ClassSize(int c) {
    if (c < 16) return static_cast<std::size_t>(c + 1) * kBlockAlign;
    int top = 13 + (c - 16) / 16;
    int m = 16 + (c - 16) % 16;
    return static_cast<std::size_t>(m + 1) << (top - 4);
  }

  // Blocks per slab of class `c` (at least one).
  static std::size_t SlabCount(int c) {
    std::size_t n = kSlabTarget / ClassSize(c);
    return n == 0 ? 1 : n;
  }
  static std::size_t SlabBytes(int c) { return SlabCount(c) * ClassSize(c); }
};

}  // namespace gpumem
