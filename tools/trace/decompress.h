// Whole-file reading with transparent decompression (xz, gzip, zstd), chosen by the
// file's magic bytes, not its name.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace gpumem::trace {

// The file's bytes, decompressed if they start with an xz, gzip or zstd magic.
// Errors name the file: a missing file, a truncated or corrupt compressed stream.
absl::StatusOr<std::string> ReadFileDecompressed(const std::string& path);

// The same, for bytes already in memory; `name` is used in error messages.
absl::StatusOr<std::string> Decompress(std::string data, const std::string& name);

}  // namespace gpumem::trace
