// Passes of a loop that nothing marks: plain tensor code (k-means, a solver, a model
// written as functions and trained with torch.func) calls no optimizer, no backward and no
// module, so no step is ever marked. Such a loop still allocates the same stacks once a
// pass; the first stack seen at a steady interval for kSteadyGaps gaps running (at least
// kMinGap allocations apart) becomes the *anchor*, and each of its allocations starts a
// pass. A stack that repeats at least twice as far apart later (an outer loop around the
// first) takes over. The offline report finds passes over the whole trace
// (tools/report/steps.cc); this is the dying process's view, in bounded memory.
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"

namespace gpumem {

class PassFinder {
 public:
  static constexpr std::uint32_t kSteadyGaps = 8;
  static constexpr std::uint64_t kMinGap = 3;
  static constexpr std::size_t kMaxStacks = 4096;

  enum class Seen {
    kNothing,    // no pass starts here
    kPass,       // the anchor again: a pass starts
    kNewAnchor,  // a stack became the anchor here: passes start over in its rhythm
  };
  // One allocation's stack (0: none recorded, which never anchors).
  Seen Add(std::uint32_t stack);
  bool found() const { return anchor_gap_ != 0; }
  std::uint32_t anchor() const { return anchor_; }

 private:
  struct Rhythm {
    std::uint64_t last = 0;     // the allocation count at its last allocation
    std::uint64_t gap = 0;      // the interval its current run of steady gaps began with
    std::uint32_t steady = 0;   // gaps within a factor of two of `gap`, in a row
  };
  std::uint64_t allocations_ = 0;
  absl::flat_hash_map<std::uint32_t, Rhythm> rhythms_;
  std::uint32_t anchor_ = 0;
  std::uint64_t anchor_gap_ = 0;
};

}  // namespace gpumem
