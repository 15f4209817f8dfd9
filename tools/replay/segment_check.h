// How closely a replay followed the recording allocator, segment by segment: the trace's
// own segment_alloc sizes against the segments the emulating policy asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tools/trace/trace.h"

namespace gpumem::replay {

struct SegmentMatch {
  std::size_t recorded = 0;   // segment_alloc events in the trace
  std::size_t replayed = 0;   // segments the policy allocated
  std::size_t matching = 0;   // positions where the sizes are equal
  std::size_t first_mismatch = 0;  // position of the first difference (== matching)
};

// Compares position by position; `matching` counts equal sizes at equal positions.
SegmentMatch CompareSegments(const trace::Trace& trace,
                             const std::vector<std::uint64_t>& replayed_sizes);

}  // namespace gpumem::replay
