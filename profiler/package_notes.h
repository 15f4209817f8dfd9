// The annotation that names a thread running the training loop (type 11, no device):
//   "gpumem: loop thread=4242"
// written once per thread, the first time the Python package sees it call a model, run a
// backward pass or step an optimizer. Until then, and in traces without it, the loop's
// thread is the process's main thread (its id is the pid). Readers tell helper threads
// (a loader's, a prefetcher's) from the loop's by it (report::HelperKept).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"

namespace gpumem::format {

inline constexpr absl::string_view kLoopThreadNotePrefix = "gpumem: loop thread=";
inline constexpr absl::string_view kStepsComingNote = "gpumem: steps coming";

inline std::string LoopThreadNoteText(std::uint32_t thread) {
  return absl::StrCat(kLoopThreadNotePrefix, thread);
}

// nullopt where `text` is not such a note or is malformed.
inline std::optional<std::uint32_t> ParseLoopThreadNote(absl::string_view text) {
  std::uint32_t thread = 0;
  if (!absl::ConsumePrefix(&text, kLoopThreadNotePrefix) || !absl::SimpleAtoi(text, &thread)) {
    return std::nullopt;
  }
  return thread;
}

}  // namespace gpumem::format
