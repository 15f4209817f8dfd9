// One entry point for every trace file: the format is chosen by content.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

// Reads a PyTorch memory snapshot pickle (plain, .xz, .gz, .zst), a flattened .tsv(.gz)
// trace, or a gpumem trace. Errors are one line naming the file and the position.
absl::StatusOr<Trace> LoadTrace(const std::string& path);

}  // namespace gpumem::trace
