// Backward allocations under the forward code that caused them. PyTorch's autograd
// engine runs backward on threads without Python frames; a gpumem trace links each
// allocation to autograd (record type 12, docs/trace-format.md): forward allocations
// carry PyTorch's next sequence number on their thread, backward ones the node being
// run (its name, sequence number and forward thread). A node's sequence number is taken
// when the forward op creates it, just before the op's kernels allocate, so the first
// forward allocation on that thread carrying `seq + 1` is the op's own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tools/trace/frame_table.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

struct AutogradLink {
  std::size_t event = 0;        // index into Trace::events
  std::uint64_t seq = 0;        // forward: sequence number peeked; backward: the node's
  std::uint32_t thread = 0;     // PyTorch's id of the forward thread
  bool backward = false;        // made while a backward node ran
  std::uint32_t node_frame = 0; // backward: the Trace frame naming the node
};

struct AutogradSummary {
  std::size_t backward = 0;  // backward events linked
  std::size_t attributed = 0;  // ... of which found their forward op's stack
  std::size_t to_caller = 0;   // ... of which, with none, took their pass's caller's
};

// The file of the frame that names a backward node in a stack.
inline constexpr std::string_view kAutogradFile = "<autograd>";

// Gives every backward event the stack: its own frames (native ones, if recorded), then
// "<node> (backward)" (file kAutogradFile), then the Python stack of the forward op that
// created the node where the trace has it. A node no forward op made (AccumulateGrad,
// making a parameter's gradient) or one whose op the trace lacks takes instead a
// "<backward pass>" frame and the stack of its forward thread's last allocation before
// it: the gradient seed of the loss.backward() that ran it. Events must still be in file
// order or any order: the earliest forward event by time wins.
AutogradSummary AttributeBackward(const std::vector<AutogradLink>& links, FrameTable* table,
                                  Trace* trace);

// By stack id: whether the stack passes through a backward node (AttributeBackward's
// frame), i.e. was allocated by autograd's backward.
std::vector<bool> BackwardStacks(const Trace& trace);

}  // namespace gpumem::trace
