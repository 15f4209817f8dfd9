// One rank's figures for the merged view of a job's traces: what `gpumem report` keeps of
// each trace once its own analysis is done, so that hundreds of ranks fit in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/report/report.h"

namespace gpumem::report {

struct RankSummary {
  std::string source;
  std::size_t file_index = 0;  // its place on the command line
  std::optional<std::int64_t> rank;
  std::string rank_from;  // "header", "file name" or "file order"
  std::string host;
  std::optional<std::int64_t> world_size;
  std::size_t steps = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  // Device memory outside the allocator at the peak (docs/multi-gpu.md); nullopt: unknown.
  std::optional<std::uint64_t> outside_allocator;
  std::optional<std::int64_t> pid;  // the recording process's, from the header
  // Other processes with memory on its GPU at the peak (NVML); nullopt: not read then.
  std::optional<std::vector<ProcessBytes>> other_processes;
  double leak_bytes_per_step = 0;
  std::string leak_site;  // the largest suspect's "file:line function"
  std::optional<std::size_t> projected_oom_step;  // 0-based
  std::size_t ooms = 0;
  std::optional<std::size_t> first_oom_step;  // 0-based
  std::string damage;  // the reader's first warning: the trace was cut or damaged
  double peak_vs_lowest = 1;  // peak allocated / the lowest rank's
  std::string differs;  // how it differs from the rest of the job; empty if it does not
};

// The rank from the trace's header, else its file name, else `file_index`.
RankSummary SummarizeRank(const Report& report, std::size_t file_index);

// The rank a file name gives: the digits after "rank" (gpumem-rank12-node3-991.gpumem),
// else the last digits before the first dot (run-12.gpumem, run-12.4411.gpumem).
std::optional<std::int64_t> RankFromFileName(const std::string& path);

}  // namespace gpumem::report
