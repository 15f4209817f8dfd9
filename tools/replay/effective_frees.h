// Which trace events free a block. PyTorch emits free_requested when the program drops a
// block and free_completed when queued work on other streams is done with it; the memory
// is reusable only then. A free_requested counts as the free only if no free_completed
// follows for that block (older recorders, or a ring buffer that cut it off).
#pragma once

#include <vector>

#include "tools/trace/trace.h"

namespace gpumem::replay {

// One flag per event: true where the event is the one that frees its block.
std::vector<bool> EffectiveFrees(const std::vector<trace::Event>& events);

}  // namespace gpumem::replay
