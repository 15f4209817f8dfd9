// Allocations a PyTorch snapshot records while a backward pass runs. Autograd runs
// backward on threads of its own, with no Python stack, so PyTorch records none for them
// (or only C++ frames) and every gradient a script keeps would be named "<no Python
// frames>". The call that started the pass (loss.backward(), torch.autograd.grad) made an
// allocation of its own first, the gradient it starts from, with the script's stack: each
// allocation with no Python frame after it, until the script's thread allocates again, is
// given that stack behind a "<backward pass>" frame.
#pragma once

#include <cstddef>
#include <string_view>

#include "tools/trace/frame_table.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

// The file of the frame that stands for autograd's thread between an allocation's own
// frames and the Python stack of the call that started the backward pass.
inline constexpr std::string_view kBackwardPassFile = "<backward pass>";

// That frame, interned in `table` (once a trace needs it).
std::uint32_t InternBackwardPassFrame(FrameTable* table);

// Returns how many allocations were given the stack of the call that started their pass.
std::size_t AttributeToBackwardCaller(Trace* trace);

}  // namespace gpumem::trace
