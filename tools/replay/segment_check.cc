#include "tools/replay/segment_check.h"

#include <algorithm>

namespace gpumem::replay {

SegmentMatch CompareSegments(const trace::Trace& trace,
                             const std::vector<std::uint64_t>& replayed_sizes) {
  std::vector<std::uint64_t> recorded;
  for (const trace::Event& e : trace.events) {
    if (e.action == trace::Action::kSegmentAlloc) recorded.push_back(e.size);
  }
  SegmentMatch m;
  m.recorded = recorded.size();
  m.replayed = replayed_sizes.size();
  const std::size_t n = std::min(recorded.size(), replayed_sizes.size());
  bool diverged = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (recorded[i] == replayed_sizes[i]) {
      ++m.matching;
    } else if (!diverged) {
      diverged = true;
      m.first_mismatch = i;
    }
  }
  if (!diverged) m.first_mismatch = n;
  return m;
}

}  // namespace gpumem::replay
