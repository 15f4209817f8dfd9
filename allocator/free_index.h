// FreeIndex: a LargePool's free blocks by size, so best fit takes constant time instead
// of a tree search. Every size up to kExactLimit has a list of its own (sizes are
// multiples of kBlockAlign); above it, one list per size class (16 per doubling) holds
// blocks within 6.25 % of each other, and best fit scans that list. A two-level bitmap
// finds the first non-empty list at or above a request's.
// Blocks are linked through their own free_prev / free_next: no allocation on any path.
// Not thread-safe: the LargePool calls it under the allocator's lock.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/size_classes.h"

namespace gpumem {

struct Block;

class FreeIndex {
 public:
  static constexpr std::size_t kExactLimit = kSmallLimit;
  static constexpr std::size_t kExactLists = kExactLimit / kBlockAlign;
  static constexpr std::size_t kLists = kExactLists + 44 * 16;  // classes up to 2^64

  void Insert(Block* b);
  void Erase(Block* b);
  // The smallest free block of at least `bytes` (among equals: the one freed last in an
  // exact list, the lowest address in a class list); null if none. It stays indexed.
  Block* BestFit(std::size_t bytes) const;
  // The largest free block; null if none.
  Block* Largest() const;
  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  // Every free block, by size then address: for the slow paths that walk them all.
  std::vector<Block*> Sorted() const;

  // The list a block of `bytes` (a multiple of kBlockAlign, > 0) belongs to.
  static std::size_t ListOf(std::size_t bytes);

 private:
  static constexpr std::size_t kWords = (kLists + 63) / 64;
  static_assert(kWords <= 64, "one summary word covers every bitmap word");
  static constexpr std::size_t kNone = ~std::size_t{0};

  // The first non-empty list at or after `i`, or kNone.
  std::size_t NextNonEmpty(std::size_t i) const;
  std::size_t LastNonEmpty() const;
  // The smallest block of at least `bytes` in list `i` (lowest address among equals).
  Block* SmallestIn(std::size_t i, std::size_t bytes) const;
  void Mark(std::size_t i);
  void Clear(std::size_t i);

  std::array<Block*, kLists> heads_{};
  std::array<std::uint64_t, kWords> words_{};  // bit: list non-empty
  std::uint64_t summary_ = 0;                  // bit: word non-zero
  std::size_t count_ = 0;
};

}  // namespace gpumem
