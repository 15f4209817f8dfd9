// Traces for the report benchmarks and their smoke tests: any loaded trace written back
// as a gpumem trace (as the profiler writes it), and the same trace with a leak added.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tools/trace/trace.h"

namespace gpumem::bench {

// Records `t` through the profiler's TraceWriter into `path`, with `header` entries
// (rank, world_size, host... win over the writer's own). Returns the records written,
// 0 on failure (said on stderr).
std::uint64_t WriteGpumemTrace(const trace::Trace& t, const std::string& path,
                               const std::map<std::string, std::string>& header = {});

// `t` with `steps` allocations of `bytes_per_step`, never freed, from train.py:88
// keep_logits, spread evenly over its events: a leak of that many bytes a step.
trace::Trace WithLeak(trace::Trace t, std::uint64_t bytes_per_step, std::size_t steps);

}  // namespace gpumem::bench
