// UsageMeter: the bytes that large pools have handed out (blocks and slabs, as carved),
// and their peak. The heaps of one kind share one: the growth budget counts each kind's
// peak (CachingAllocator::BudgetPeak).
#pragma once

#include <algorithm>
#include <cstdint>

namespace gpumem {

struct UsageMeter {
  std::uint64_t bytes = 0;
  std::uint64_t peak = 0;

  void Add(std::uint64_t n) {
    bytes += n;
    peak = std::max(peak, bytes);
  }
  void Sub(std::uint64_t n) { bytes -= n; }
};

}  // namespace gpumem
