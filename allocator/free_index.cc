#include "allocator/free_index.h"

#include <algorithm>
#include <bit>

#include "allocator/large_pool.h"

namespace gpumem {

std::size_t FreeIndex::ListOf(std::size_t bytes) {
  if (bytes <= kExactLimit) return bytes / kBlockAlign - 1;
  // bytes-1 = m << shift with m in [16, 32): class (m+1) << shift, as in SizeClasses.
  const std::size_t x = bytes - 1;
  const int top = std::bit_width(x) - 1;  // >= 20
  const int shift = top - 4;
  const std::size_t m = x >> shift;
  return kExactLists + static_cast<std::size_t>(top - 20) * 16 + (m - 16);
}

void FreeIndex::Mark(std::size_t i) {
  words_[i / 64] |= std::uint64_t{1} << (i % 64);
  summary_ |= std::uint64_t{1} << (i / 64);
}

void FreeIndex::Clear(std::size_t i) {
  std::uint64_t& w = words_[i / 64];
  w &= ~(std::uint64_t{1} << (i % 64));
  if (w == 0) summary_ &= ~(std::uint64_t{1} << (i / 64));
}

void FreeIndex::Insert(Block* b) {
  const std::size_t i = ListOf(b->size);
  Block*& head = heads_[i];
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

void FreeIndex::Erase(Block* b) {
  const std::size_t i = ListOf(b->size);
  if (b->free_prev != nullptr) {
    b->free_prev->free_next = b->free_next;
  } else {
    heads_[i] = b->free_next;
    if (b->free_next == nullptr) Clear(i);
  }
  if (b->free_next != nullptr) b->free_next->free_prev = b->free_prev;
  b->free_prev = b->free_next = nullptr;
  --count_;
}

std::size_t FreeIndex::NextNonEmpty(std::size_t i) const {
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

std::size_t FreeIndex::LastNonEmpty() const {
  if (summary_ == 0) return kNone;
  const std::size_t w = 63 - static_cast<std::size_t>(std::countl_zero(summary_));
  return w * 64 + 63 - static_cast<std::size_t>(std::countl_zero(words_[w]));
}

Block* FreeIndex::SmallestIn(std::size_t i, std::size_t bytes) const {
  if (i < kExactLists) return heads_[i];  // one size per list: the head fits
  Block* best = nullptr;
  for (Block* b = heads_[i]; b != nullptr; b = b->free_next) {
    if (b->size < bytes) continue;
    if (best == nullptr || b->size < best->size || (b->size == best->size && b->addr < best->addr)) {
      best = b;
    }
  }
  return best;
}

Block* FreeIndex::BestFit(std::size_t bytes) const {
  std::size_t i = ListOf(bytes);
  if (heads_[i] != nullptr) {
    if (Block* b = SmallestIn(i, bytes)) return b;
  }
  i = NextNonEmpty(i + 1);
  return i == kNone ? nullptr : SmallestIn(i, 0);
}

Block* FreeIndex::Largest() const {
  const std::size_t i = LastNonEmpty();
  if (i == kNone) return nullptr;
  Block* largest = heads_[i];
  for (Block* b = largest->free_next; b != nullptr; b = b->free_next) {
    if (b->size > largest->size) largest = b;
  }
  return largest;
}

std::vector<Block*> FreeIndex::Sorted() const {
  std::vector<Block*> all;
  all.reserve(count_);
  for (std::size_t i = NextNonEmpty(0); i != kNone; i = NextNonEmpty(i + 1)) {
    for (Block* b = heads_[i]; b != nullptr; b = b->free_next) all.push_back(b);
  }
  std::sort(all.begin(), all.end(), [](const Block* a, const Block* b) {
    return a->size != b->size ? a->size < b->size : a->addr < b->addr;
  });
  return all;
}

}  // namespace gpumem
