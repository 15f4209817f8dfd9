// A device's memory layout as the C ABI gives it (gpumem_layout): segments in address
// order, each followed by its blocks. For snapshots and checkpointed pool states.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "hooks/gpumem.h"

namespace gpumem::torch {

struct Layout {
  std::vector<gpumem_segment_t> segments;
  std::vector<gpumem_block_t> blocks;  // segment i's blocks follow segment i-1's
};

// The device's layout; asked again with room enough if it grew in between.
Layout ReadLayout(int device);

// gpumem's last error (gpumem_last_error) as a string.
std::string LastGpumemError();

}  // namespace gpumem::torch
