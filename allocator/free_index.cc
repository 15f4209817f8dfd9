#include "allocator/free_index.h"

#include <algorithm>
#include <bit>

namespace gpumem {

std::size_t FreeIndex::LastNonEmpty() const {
  if (summary_ == 0) return kNone;
  const std::size_t w = 63 - static_cast<std::size_t>(std::countl_zero(summary_));
  return w * 64 + 63 - static_cast<std::size_t>(std::countl_zero(words_[w]));
}

Block* FreeIndex::BestFitFrom(std::size_t i, std::size_t bytes) const {
  if (i >= kExactLists && heads_[i] != nullptr) {
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
