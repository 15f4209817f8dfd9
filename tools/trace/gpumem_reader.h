// Reads gpumem's own trace files (docs/trace-format.md), including those of a process
// that was killed while recording: every chunk whose checksum holds is kept, a corrupt
// chunk is skipped (the reader resynchronises on the next valid one), the records the
// killed writer had not compressed yet are taken from the raw journal, and
// Trace::warnings says what was recovered and where the data stopped.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

struct GpumemFileInfo {
  std::map<std::string, std::string> header;  // pid, rank, host, stacks, ...
  bool complete = false;            // the end chunk was found: the recording finished
  std::uint64_t chunks = 0;         // chunks read
  std::uint64_t bytes_used = 0;     // bytes of the file in valid chunks (prefix included)
  std::uint64_t file_bytes = 0;
  std::uint64_t corrupt_chunks = 0; // damaged places skipped or stopped at
  // Events of a killed run taken from the raw journal (recorded, not yet compressed).
  std::uint64_t journal_events = 0;
  std::uint64_t journal_damaged = 0; // journal records whose check failed (not kept)
  // A ring segment's checkpoint (GPUMEM_TRACE_MAX): its chunks (0: none), its events,
  // which are the trace's first (blocks as allocs, segments, mapped ranges), and of them
  // the blocks.
  std::uint64_t checkpoint_chunks = 0;
  std::uint64_t checkpoint_events = 0;
  std::uint64_t checkpoint_blocks = 0;
};

bool IsGpumemTrace(absl::string_view data);

// Errors (not a gpumem trace, an unsupported version, no readable chunk at all) are one
// line naming `name` and the offset. Everything else becomes a warning.
absl::StatusOr<Trace> ParseGpumemTrace(absl::string_view data, const std::string& name,
                                       GpumemFileInfo* info = nullptr);

}  // namespace gpumem::trace
