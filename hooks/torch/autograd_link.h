// Links the calling thread's next allocation to PyTorch autograd, so that the report can
// put allocations made by backward (on the engine's threads, with no Python frames)
// under the forward code that created their node (docs/trace-format.md, record type 12).
#pragma once

namespace gpumem::torch {

// On an autograd engine thread running a node: the node's sequence number, forward
// thread and name; elsewhere: the sequence number the next forward op will take. Call
// on the allocating thread just before the allocation, only while a trace is open.
void LinkNextAllocationToAutograd();

}  // namespace gpumem::torch
