// The flattened trace form: one event a line (`seq action addr size stream time_us
// stack`), then `S id frames` lines, frames as `file:line:function` joined by " | ",
// innermost first. Lines starting with '#' are comments.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/trace/decompress.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

// Called with the fraction of the input read so far, about every 1%.
using ReadProgress = std::function<void(double fraction)>;

// Errors name `name`, the line and what is wrong with it.
absl::StatusOr<Trace> ParseTsvTrace(absl::string_view text, const std::string& name);

// The same, parsing lines as `reader` decompresses them: the text is never held whole.
absl::StatusOr<Trace> ReadTsvTrace(DecompressingReader& reader,
                                   const ReadProgress& progress = nullptr);

}  // namespace gpumem::trace
