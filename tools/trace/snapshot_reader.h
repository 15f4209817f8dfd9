// PyTorch memory snapshots (torch.cuda.memory._snapshot(), pickled) into a Trace.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/trace/pickle_value.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

// The snapshot dict as a Trace: device_traces[d] events (several devices are interleaved
// by time, each keeping its own order), frames innermost first, segments (end
// state), external_annotations and allocator_settings.expandable_segments. Then the state
// at the first event is rebuilt (see snapshot_prelude.h). Errors read
// "NAME: byte N: what", N being where the offending value starts in the pickle.
absl::StatusOr<Trace> SnapshotToTrace(const PickleTree& tree, const std::string& name);

// ReadPickle and SnapshotToTrace.
absl::StatusOr<Trace> ParseSnapshotPickle(absl::string_view data, const std::string& name);

}  // namespace gpumem::trace
