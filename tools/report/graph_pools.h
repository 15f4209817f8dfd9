// CUDA graph pools as the trace's notes bound them (profiler/graph_pool_note.h): where
// each capture begins and ends and where each pool is released, as positions in the
// event list. LiveState counts a pool's memory with the code that made it from these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "profiler/graph_pool_note.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

struct GraphPoolMark {
  std::size_t before_event = 0;  // applies before trace.events[before_event] (or at the end)
  std::int32_t device = 0;
  format::GraphPoolNote note;
};

// In event order. A capture begins before the events of its microsecond and ends, or its
// pool is released, after them: the allocations it makes are inside it.
std::vector<GraphPoolMark> FindGraphPoolMarks(const trace::Trace& trace);

}  // namespace gpumem::report
