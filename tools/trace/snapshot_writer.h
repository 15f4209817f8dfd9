// Export of a Trace as a PyTorch memory snapshot pickle (what torch.cuda.memory._snapshot()
// returns, pickled), so that PyTorch's memory_viz opens it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

// Pickle protocol 4 (memory_viz fails on protocol 5), written with only the opcodes that
// PyTorch's own snapshots use. Top level: `segments` (the trace's end state), `device_traces`
// (one list per device; frames as {filename, line, name} dicts, innermost first),
// `allocator_settings`, `external_annotations`. gpumem-only actions (step, annotate) have no
// PyTorch spelling: steps become external annotations named "gpumem.step", annotate events
// are left out.
absl::StatusOr<std::string> WriteSnapshotPickle(const Trace& trace);

}  // namespace gpumem::trace
