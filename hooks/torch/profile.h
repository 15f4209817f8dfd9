// Profile-only mode: PyTorch keeps its native caching allocator and gpumem records its
// allocations, frees and segment events with stacks into the gpumem trace (same format,
// so `gpumem report` reads it). Built only where CMake finds Torch.
#pragma once

#include <cstddef>

namespace gpumem::torch {

// Call once CUDA is initialized (the Python package queues it with torch.cuda's lazy
// init). Throws c10::Error when the trace cannot be opened, GPUMEM_* is invalid, or
// PyTorch's allocator is not its native caching allocator (gpumem installed,
// cudaMallocAsync backend, another pluggable allocator).
void profile();
bool profiling();

}  // namespace gpumem::torch

extern "C" {
// For ctypes: 0 on success, else -1 with the reason in `err` (snprintf rules).
__attribute__((visibility("default"))) int gpumem_torch_profile(char* err, std::size_t len);
}
