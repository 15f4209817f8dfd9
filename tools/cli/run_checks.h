// What `gpumem run` checks before it starts the program: the recorder's own variables
// (GPUMEM_STACKS, GPUMEM_TRACE_FLUSH_MS...) and that the trace file can be written, so a
// typo or a read-only folder fails at once instead of after hours of training.
#pragma once

#include "absl/status/status.h"

namespace gpumem::cli {

// An error names the variable and its value.
absl::Status CheckTraceSettings();

}  // namespace gpumem::cli
