// gzip compression in memory (pprof files are gzipped protos).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumem::pprof {

// One gzip member holding `data`.
absl::StatusOr<std::string> Gzip(absl::string_view data);

}  // namespace gpumem::pprof
