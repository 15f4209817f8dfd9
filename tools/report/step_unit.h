// Whether the stretches between an inferred step anchor's occurrences are training steps
// or repeats inside one forward (a model's layers allocate the same stacks layer after
// layer). A step holds a backward: where the trace links allocations to autograd, each
// stretch must hold a backward allocation; otherwise each must free about as much as it
// allocates, as a loop in a steady state does (a forward keeps its activations for the
// backward, so its layers free little).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tools/trace/trace.h"

namespace gpumem::report {

// The bytes events [begin, end) allocate and free. PyTorch snapshots have both kinds of
// free for one block, gpumem traces the first only: requests count where there are any.
struct BytesMoved {
  std::uint64_t allocated = 0;
  std::uint64_t freed = 0;
};
BytesMoved BytesMovedIn(const trace::Trace& trace, std::size_t begin, std::size_t end);

class StepUnitCheck {
 public:
  explicit StepUnitCheck(const trace::Trace& trace);

  // `bounds`: event indices where the stretches start, ascending (the last one only ends
  // the stretch before it). True when most stretches look like whole steps.
  bool LooksLikeSteps(const std::vector<std::size_t>& bounds) const;

  bool has_backward() const { return has_backward_; }

 private:
  bool HoldsBackward(std::size_t begin, std::size_t end) const;
  bool FreesMostOfWhatItAllocates(std::size_t begin, std::size_t end) const;

  const trace::Trace& trace_;
  const std::vector<bool> backward_stack_;  // by stack id: it runs under an autograd node
  const bool has_backward_;
};

}  // namespace gpumem::report
