// Per-process trace file names: GPUMEM_TRACE=run-%r.gpumem gives one file per torchrun
// rank, %l per local rank, %h the host, %p one per process.
#pragma once

#include <string>

namespace gpumem {

// What a trace name can hold of the process that writes it.
struct TraceNameParts {
  long pid = 0;
  std::string rank = "0";        // %r
  std::string local_rank = "0";  // %l
  std::string host;              // %h

  // This process: its pid, RankFromEnvironment(), LocalRankFromEnvironment(), hostname.
  static TraceNameParts OfThisProcess();
};

// Replaces %p, %r, %l, %h with `parts` and %% with %. Other % sequences stay as they are.
std::string ExpandTracePath(const std::string& pattern, const TraceNameParts& parts);
// The same with this process's local rank and host.
std::string ExpandTracePath(const std::string& pattern, long pid, const std::string& rank);

// The job-wide rank: $RANK (torchrun), else $SLURM_PROCID (srun); "" when neither is set.
std::string GlobalRankFromEnvironment();
// The node-local rank: $LOCAL_RANK, else $SLURM_LOCALID; "" when neither is set.
std::string LocalRankFromEnvironment();
// The rank a name's %r means: the global rank, else the local one, else "0".
std::string RankFromEnvironment();

// The trace name when GPUMEM_TRACE is unset: gpumem-%p.gpumem; in a ranked job
// gpumem-rank%r-%h-%p.gpumem, so that ranks (and restarts) of a multi-node job writing to
// one shared folder never take one name.
std::string DefaultTracePattern();

// `path` with ".<pid>" before its extension (run-0.gpumem -> run-0.1234.gpumem; no
// extension: appended): the name a trace takes when another process writes `path`.
std::string PathWithPid(const std::string& path, long pid);

}  // namespace gpumem
