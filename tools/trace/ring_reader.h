// Reads a ring trace (GPUMEM_TRACE_MAX) as one trace: from any of its segments, finds the
// others of the same ring beside it, and stitches them oldest first. The oldest kept
// segment's checkpoint (the blocks live when it began, with their stacks) comes first, as
// allocations at its first event; the other segments' checkpoints repeat what the
// segments before them already say and are left out. Trace::ring says what was kept and
// that what came before was dropped (docs/trace-format.md, Ring traces).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tools/trace/gpumem_reader.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

bool IsRingSegment(const GpumemFileInfo& info);

// `parsed` is what ParseGpumemTrace made of the file at `path`, with its `info`; a trace
// that is no ring segment comes back as it was. A segment that reads no event (the newest
// of a run killed as it opened) is left out with a warning.
absl::StatusOr<Trace> ReadRing(const std::string& path, absl::StatusOr<Trace> parsed,
                               const GpumemFileInfo& info);

}  // namespace gpumem::trace
