// The flattened trace form: one event a line (`seq action addr size stream time_us
// stack`), then `S id frames` lines, frames as `file:line:function` joined by " | ",
// innermost first. Lines starting with '#' are comments.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

// Errors name `name`, the line and what is wrong with it.
absl::StatusOr<Trace> ParseTsvTrace(absl::string_view text, const std::string& name);

}  // namespace gpumem::trace
