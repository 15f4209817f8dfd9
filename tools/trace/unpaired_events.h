// Allocs and frees that do not pair up (a recording that started mid-run, a free lost in a
// damaged chunk): what `gpumem report` and `gpumem replay` both do with them, in the same
// words. A free of a block the trace never allocated is ignored; an alloc at an address
// still live takes the earlier block as freed there.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace gpumem::trace {

inline std::string UnmatchedFreesWarning(std::uint64_t frees) {
  return absl::StrCat(frees, " frees of blocks the trace never allocated (recording started "
                      "mid-run, or the alloc was lost); they are ignored");
}

inline std::string ReusedAddressesWarning(std::uint64_t allocs) {
  return absl::StrCat(allocs, " allocations at an address still live (its free was not "
                      "recorded, or was lost); the earlier block is taken as freed there");
}

}  // namespace gpumem::trace
