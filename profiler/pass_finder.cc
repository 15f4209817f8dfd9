#include "profiler/pass_finder.h"

namespace gpumem {

PassFinder::Seen PassFinder::Add(std::uint32_t stack) {
  ++allocations_;
  if (stack == 0) return Seen::kNothing;
  auto it = rhythms_.find(stack);
  if (it == rhythms_.end()) {
    if (rhythms_.size() < kMaxStacks) rhythms_[stack].last = allocations_;
    return Seen::kNothing;
  }
  Rhythm& r = it->second;
  const std::uint64_t gap = allocations_ - r.last;
  r.last = allocations_;
  if (r.gap != 0 && gap * 2 >= r.gap && gap <= r.gap * 2) {
    ++r.steady;
  } else {
    r.gap = gap;
    r.steady = 1;
  }
  if (found() && stack == anchor_) return Seen::kPass;
  const bool steady = r.steady >= kSteadyGaps && r.gap >= kMinGap;
  if (!steady || (found() && r.gap < 2 * anchor_gap_)) return Seen::kNothing;
  anchor_ = stack;
  anchor_gap_ = r.gap;
  return Seen::kNewAnchor;
}

}  // namespace gpumem
