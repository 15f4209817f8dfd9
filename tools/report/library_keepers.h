// Libraries that keep tensors the user's code never holds: Hugging Face's Trainer gathers
// every evaluation batch's logits on the device, and a torchmetrics metric with list
// states keeps every update's inputs until reset(). Where memory that grows (or fills the
// device) was allocated inside one of them, below the user's innermost frame, the cure is
// that library's setting, not a reference the user drops. Shared by the report (over a
// trace's frames) and the dying process's verdict (over the frames it recorded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {

enum class Keeper : std::uint8_t {
  kNone,
  kHfEvaluation,    // transformers' EvalLoopContainer: logits gathered until the end
  kMetricStates,    // a torchmetrics metric's list states: inputs kept until reset()
};

// The keeper a library frame belongs to (kNone for any other frame).
Keeper KeeperOfFrame(absl::string_view filename, absl::string_view function);

// The keeper among a stack's frames inside its site: innermost first, up to the first
// frame outside library code (the site). `Frame` has `filename` and `function`.
template <typename Frame>
Keeper KeeperInside(const std::vector<Frame>& innermost_first) {
  for (const Frame& f : innermost_first) {
    if (!IsLibraryFile(f.filename)) break;
    if (const Keeper k = KeeperOfFrame(f.filename, f.function); k != Keeper::kNone) return k;
  }
  return Keeper::kNone;
}

// What keeps the memory, for evidence ("Hugging Face's Trainer (its evaluation loop)",
// "a torchmetrics metric (its list states)").
const char* KeeperName(Keeper k);
// ", kept by NAME" after a site, or "" for kNone.
std::string KeptByText(Keeper k);
// Whether a failed request made by `requester` grows with growth that `grower` keeps: the
// same library, working over what it keeps (a metric's compute() over its states).
bool RequestedByGrower(Keeper requester, Keeper grower);
// A JSON key: "hf_trainer_evaluation", "torchmetrics_states"; "" for kNone.
const char* KeeperKey(Keeper k);
// The library's own cure, in the words of its settings.
const char* KeeperFix(Keeper k);

// An OOM's fix (`fix`, the class's own) where a library keeps the memory: a leak whose
// fastest-growing site it keeps (`grower`) is cured by its setting alone; a genuine peak
// whose failed request it made (`requester`, for what it keeps), by its setting
// first. Any other, `fix` unchanged.
std::string FixWithKeeper(OomClass cls, Keeper grower, Keeper requester, absl::string_view fix);

}  // namespace gpumem::report
