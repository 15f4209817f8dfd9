#include "tools/report/step_unit.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "tools/trace/autograd_links.h"

namespace gpumem::report {
namespace {

using trace::Action;

// Stretches checked per candidate: enough to judge, bounded for long traces.
constexpr std::size_t kStretchesChecked = 64;
constexpr double kMinShareOfStretches = 0.8;
// A training step frees nearly all it allocates (a leak keeps a small part); a forward
// layer keeps its activations, so it frees well under half.
constexpr double kMinFreedShare = 0.5;

}  // namespace

// Backward allocations carry a frame from the autograd link reader (autograd_links.h).
StepUnitCheck::StepUnitCheck(const trace::Trace& trace)
    : trace_(trace), backward_stack_(trace::BackwardStacks(trace)),
      has_backward_(absl::c_linear_search(backward_stack_, true)) {}

bool StepUnitCheck::LooksLikeSteps(const std::vector<std::size_t>& bounds) const {
  if (bounds.size() < 2) return false;
  const std::size_t stretches = bounds.size() - 1;
  const std::size_t stride = std::max<std::size_t>(1, stretches / kStretchesChecked);
  std::size_t checked = 0, whole = 0;
  for (std::size_t k = 0; k < stretches; k += stride) {
    ++checked;
    whole += has_backward_ ? HoldsBackward(bounds[k], bounds[k + 1])
                           : FreesMostOfWhatItAllocates(bounds[k], bounds[k + 1]);
  }
  return static_cast<double>(whole) >= kMinShareOfStretches * static_cast<double>(checked);
}

bool StepUnitCheck::HoldsBackward(std::size_t begin, std::size_t end) const {
  for (std::size_t i = begin; i < end; ++i) {
    const trace::Event& e = trace_.events[i];
    if (e.action == Action::kAlloc && e.stack_id < backward_stack_.size() &&
        backward_stack_[e.stack_id]) {
      return true;
    }
  }
  return false;
}

BytesMoved BytesMovedIn(const trace::Trace& trace, std::size_t begin, std::size_t end) {
  std::uint64_t allocated = 0, requested = 0, completed = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const trace::Event& e = trace.events[i];
    if (e.action == Action::kAlloc) allocated += e.size;
    if (e.action == Action::kFreeRequested) requested += e.size;
    if (e.action == Action::kFreeCompleted) completed += e.size;
  }
  return {allocated, requested > 0 ? requested : completed};
}

// Frees of any block count: an anchor mid-step starts a stretch that frees the previous
// step's activations and allocates the next one's.
bool StepUnitCheck::FreesMostOfWhatItAllocates(std::size_t begin, std::size_t end) const {
  const BytesMoved moved = BytesMovedIn(trace_, begin, end);
  return moved.allocated > 0 && static_cast<double>(moved.freed) >=
                                    kMinFreedShare * static_cast<double>(moved.allocated);
}

}  // namespace gpumem::report
