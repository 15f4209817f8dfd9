// The size rules of PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp),
// with its default configuration (no roundup_power2_divisions).
#pragma once

#include <cstddef>

namespace gpumem::emulation {

inline constexpr std::size_t kMinBlockSize = 512;             // every size rounds to 512 B
inline constexpr std::size_t kSmallSize = std::size_t{1} << 20;  // largest "small" request
inline constexpr std::size_t kSmallBuffer = std::size_t{2} << 20;  // small segment / page
inline constexpr std::size_t kLargeBuffer = std::size_t{20} << 20;  // 1-10 MiB segment / large page
inline constexpr std::size_t kMinLargeAlloc = std::size_t{10} << 20;
inline constexpr std::size_t kRoundLarge = std::size_t{2} << 20;

// Larger requests fail at once (no device is that large, and rounding must not overflow).
inline constexpr std::size_t kMaxRequest = std::size_t{1} << 60;

// round_size(): the block size a request gets.
constexpr std::size_t RoundSize(std::size_t size) {
  return size < kMinBlockSize ? kMinBlockSize
                              : kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

// get_allocation_size(): the cudaMalloc size when no cached block fits.
constexpr std::size_t AllocationSize(std::size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace gpumem::emulation
