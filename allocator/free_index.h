// FreeIndex: a LargePool's free blocks by size, so best fit takes constant time instead
// of a tree search. Every size up to kExactLimit has a list of its own (sizes are
// multiples of kBlockAlign); above it, one list per size class (16 per doubling) holds
// blocks within 6.25 % of each other, and best fit scans that list. A two-level bitmap
// finds the first non-empty list at or above a request's.
// Blocks are linked through their own free_prev / free_next: no allocation on any path.
// Insert, Erase and an exact list's best fit are inline: with the pool's split and
// coalesce they are most of a large alloc+free pair (bench/c_api_pair_count).
// Not thread-safe: the LargePool calls it under the allocator's lock.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/backend.h"
#include "allocator/size_classes.h"

namespace gpumem {

struct Range;

// A piece of a LargePool's mapped memory, free or used.
struct Block {
  DevicePtr addr = 0;
  std::size_t size = 0;
  // Neighbours in address order within the range; a hole may lie between two of them.
  Block* prev = nullptr;
  Block* next = nullptr;
  Range* range = nullptr;
  Block* free_prev = nullptr;  // in the FreeIndex list of its size, while free
  Block* free_next = nullptr;
  bool free = false;
  std::uint16_t free_list = 0;  // that list: FreeIndex::ListOf(size) when filed
  // The pool's free count (LargePool::free_seq) when its pool's stream last used any of
  // it: work queued on that stream by then may still touch it. In the padding.
  std::uint32_t used_at = 0;
  DevicePtr end() const { return addr + size; }
};

// Of two free counts that may have wrapped, the later.
inline std::uint32_t LaterCount(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::int32_t>(a - b) > 0 ? a : b;
}

class FreeIndex {
 public:
  static constexpr std::size_t kExactLimit = kSmallLimit;
  static constexpr std::size_t kExactLists = kExactLimit / kBlockAlign;
  static constexpr std::size_t kLists = kExactLists + 44 * 16;  // classes up to 2^64

  // Searches read the sizes of indexed blocks: change one out of the index, or Resize it
  // before the next search (Erase finds a block's list by free_list, not by its size).
  void Insert(Block* b) { InsertIn(b, ListOf(b->size)); }
  void Erase(Block* b);
  // Erase(b), b's size set to `bytes`, Insert(b); the index's order is all that Erase
  // and Insert would make it, for less: a class list's order decides nothing (best fit
  // compares sizes and addresses), and one size's exact list is the same list.
  void Resize(Block* b, std::size_t bytes);
  // Erase(old) and Insert(b) at once, `b` not indexed; the same, for less, in one list.
  void Replace(Block* old, Block* b);
  // The smallest free block of at least `bytes` (among equals: the one freed last in an
  // exact list, the lowest address in a class list); null if none. It stays indexed.
  Block* BestFit(std::size_t bytes) const {
    const std::size_t i = ListOf(bytes);
    if (i < kExactLists && heads_[i] != nullptr) return heads_[i];  // one size: the head
    return BestFitFrom(i, bytes);
  }
  // The largest free block; null if none.
  Block* Largest() const;
  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  // Every free block, by size then address: for the slow paths that walk them all.
  std::vector<Block*> Sorted() const;

  // The list a block of `bytes` (a multiple of kBlockAlign, > 0) belongs to.
  static std::size_t ListOf(std::size_t bytes) {
    if (bytes <= kExactLimit) return bytes / kBlockAlign - 1;
    // bytes-1 = m << shift with m in [16, 32): class (m+1) << shift, as in SizeClasses.
    const std::size_t x = bytes - 1;
    const int top = std::bit_width(x) - 1;  // >= 20
    const int shift = top - 4;
    const std::size_t m = x >> shift;
    return kExactLists + static_cast<std::size_t>(top - 20) * 16 + (m - 16);
  }

 private:
  static constexpr std::size_t kWords = (kLists + 63) / 64;
  static_assert(kWords <= 64, "one summary word covers every bitmap word");
  static_assert(kLists <= UINT16_MAX, "Block::free_list holds a list");
  static constexpr std::size_t kNone = ~std::size_t{0};

  void InsertIn(Block* b, std::size_t i);
  // BestFit past an exact list's head: the rest of list `i`, then the lists above it.
  Block* BestFitFrom(std::size_t i, std::size_t bytes) const;
  // The first non-empty list at or after `i`, or kNone.
  std::size_t NextNonEmpty(std::size_t i) const {
    if (i >= kLists) return kNone;
    std::size_t w = i / 64;
    const std::uint64_t bits = words_[w] & (~std::uint64_t{0} << (i % 64));
    if (bits != 0) return w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
    if (w + 1 >= kWords) return kNone;
    const std::uint64_t rest = summary_ & (~std::uint64_t{0} << (w + 1));
    if (rest == 0) return kNone;
    w = static_cast<std::size_t>(std::countr_zero(rest));
    return w * 64 + static_cast<std::size_t>(std::countr_zero(words_[w]));
  }
  std::size_t LastNonEmpty() const;
  // The smallest block of at least `bytes` in list `i` (lowest address among equals).
  Block* SmallestIn(std::size_t i, std::size_t bytes) const;
  void Mark(std::size_t i) {
    words_[i / 64] |= std::uint64_t{1} << (i % 64);
    summary_ |= std::uint64_t{1} << (i / 64);
  }
  void Clear(std::size_t i) {
    std::uint64_t& w = words_[i / 64];
    w &= ~(std::uint64_t{1} << (i % 64));
    if (w == 0) summary_ &= ~(std::uint64_t{1} << (i / 64));
  }

  std::array<Block*, kLists> heads_{};
  std::array<std::uint64_t, kWords> words_{};  // bit: list non-empty
  std::uint64_t summary_ = 0;                  // bit: word non-zero
  std::size_t count_ = 0;
};

inline void FreeIndex::InsertIn(Block* b, std::size_t i) {
  Block*& head = heads_[i];
  b->free_list = static_cast<std::uint16_t>(i);
  b->free_prev = nullptr;
  b->free_next = head;
  if (head != nullptr) {
    head->free_prev = b;
  } else {
    Mark(i);
  }
  head = b;
  ++count_;
}

inline void FreeIndex::Erase(Block* b) {
  if (b->free_prev != nullptr) {
    b->free_prev->free_next = b->free_next;
  } else {
    heads_[b->free_list] = b->free_next;
    if (b->free_next == nullptr) Clear(b->free_list);
  }
  if (b->free_next != nullptr) b->free_next->free_prev = b->free_prev;
  b->free_prev = b->free_next = nullptr;
  --count_;
}

inline Block* FreeIndex::SmallestIn(std::size_t i, std::size_t bytes) const {
  Block* head = heads_[i];
  if (i < kExactLists) return head;  // one size per list: the head fits
  // One block (a loop's one large block, freed and taken again): no comparisons.
  if (head->free_next == nullptr) return head->size >= bytes ? head : nullptr;
  Block* best = nullptr;
  for (Block* b = head; b != nullptr; b = b->free_next) {
    if (b->size < bytes) continue;
    if (best == nullptr || b->size < best->size || (b->size == best->size && b->addr < best->addr)) {
      best = b;
    }
  }
  return best;
}

inline void FreeIndex::Resize(Block* b, std::size_t bytes) {
  const std::size_t i = ListOf(bytes);
  b->size = bytes;
  if (i == b->free_list && i >= kExactLists) return;
  Erase(b);
  InsertIn(b, i);
}

inline void FreeIndex::Replace(Block* old, Block* b) {
  const std::size_t i = ListOf(b->size);
  if (i != old->free_list || i < kExactLists) {
    Erase(old);
    InsertIn(b, i);
    return;
  }
  // Same class list: b takes old's place.
  b->free_list = old->free_list;
  b->free_prev = old->free_prev;
  b->free_next = old->free_next;
  if (b->free_prev != nullptr) {
    b->free_prev->free_next = b;
  } else {
    heads_[i] = b;
  }
  if (b->free_next != nullptr) b->free_next->free_prev = b;
  old->free_prev = old->free_next = nullptr;
}

}  // namespace gpumem
