// The depth of a decoded pickle. The unpickler builds containers bottom-up, but a memo
// reference appended later can nest them without bound; anything walking the tree would
// then recurse that deep. Checked once, over the finished tree, in time linear in its
// size. A cycle (a list that holds itself, legal pickle) is stored and not followed, so it
// adds no depth.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "tools/trace/pickle_value.h"

namespace gpumem::trace {

struct NestingFault {
  PickleId at;       // the container at fault
  std::string what;  // "containers nested deeper than 100 levels"
};

std::optional<NestingFault> CheckNesting(const PickleTree& tree, PickleId root,
                                         std::size_t max_depth);

}  // namespace gpumem::trace
