#include <array>


#include "tools/trace/trace.h"

namespace gpumem::trace {
namespace {
// PyTorch's spellings, plus gpumem's own (step, segment_map, segment_unmap).
constexpr std::array<absl::string_view, 11> kNames = {
    "alloc",       "free_requested", "free_completed", "segment_alloc",
    "segment_free", "segment_map",   "segment_unmap",  "oom",
    "snapshot",    "step",           "annotate"};
}  // namespace

const char* ActionName(Action action) {
  return kNames[static_cast<std::size_t>(action)].data();
}

std::optional<Action> ParseAction(absl::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<Action>(i);
  }
  if (name == "user_defined") return Action::kAnnotate;
  return std::nullopt;
}

}  // namespace gpumem::trace
