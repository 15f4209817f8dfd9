#include "tools/report/ranges.h"

#include <algorithm>

namespace gpumem::report {

void RangeSet::Add(std::uint64_t addr, std::uint64_t size) {
  if (size == 0) return;
  std::uint64_t begin = addr, end = addr + size;
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
  while (it != ranges_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(begin, end);
}

std::uint64_t RangeSet::Remove(std::uint64_t addr, std::uint64_t size) {
  const std::uint64_t begin = addr, end = addr + size;
  std::uint64_t removed = 0;
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin()) --it;
  while (it != ranges_.end() && it->first < end) {
    const std::uint64_t r_begin = it->first, r_end = it->second;
    if (r_end <= begin) {
      ++it;
      continue;
    }
    it = ranges_.erase(it);
    removed += std::min(r_end, end) - std::max(r_begin, begin);
    if (r_begin < begin) ranges_.emplace(r_begin, begin);
    if (r_end > end) it = ranges_.emplace(end, r_end).first;
  }
  return removed;
}

}  // namespace gpumem::report
