// Per-process trace file names: GPUMEM_TRACE=run-%r.gpumem gives one file per torchrun
// rank, %p one per process.
#pragma once

#include <string>

namespace gpumem {

// Replaces %p with `pid`, %r with `rank` and %% with %. Other % sequences stay as they are.
std::string ExpandTracePath(const std::string& pattern, long pid, const std::string& rank);

// The torchrun rank of this process: $RANK, else $LOCAL_RANK, else "0".
std::string RankFromEnvironment();

// `path` with ".<pid>" before its extension (run-0.gpumem -> run-0.1234.gpumem; no
// extension: appended): the name a trace takes when another process writes `path`.
std::string PathWithPid(const std::string& path, long pid);

}  // namespace gpumem
