// One entry point for every trace file: the format is chosen by content.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tools/trace/trace.h"
#include "tools/trace/tsv_reader.h"

namespace gpumem::trace {

// Reads a PyTorch memory snapshot pickle (plain, .xz, .gz, .zst), a flattened .tsv(.gz)
// trace, or a gpumem trace. Errors are one line naming the file and the position.
// A .tsv trace is parsed as it is decompressed, and reports `progress` as it goes.
absl::StatusOr<Trace> LoadTrace(const std::string& path, const ReadProgress& progress = nullptr);

}  // namespace gpumem::trace
