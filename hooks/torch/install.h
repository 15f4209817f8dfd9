// gpumem for libtorch programs (and, through gpumem_torch_install, for Python): makes
// gpumem PyTorch's CUDA allocator, with every hook PyTorch offers a pluggable allocator
// wired: empty_cache, memory fraction, record_stream, and an out-of-memory that raises
// PyTorch's own OutOfMemoryError. Built only where CMake finds Torch.
#pragma once

#include <cstddef>

namespace gpumem::torch {

// Call before the first CUDA allocation. Throws c10::Error when PyTorch's allocator has
// already been used (with the fix in the message) or when GPUMEM_* is invalid.
void install();
// True once install() succeeded in this process.
bool installed();

}  // namespace gpumem::torch

extern "C" {
// For ctypes: 0 on success, else -1 with the reason in `err` (snprintf rules).
__attribute__((visibility("default"))) int gpumem_torch_install(char* err, std::size_t len);
__attribute__((visibility("default"))) int gpumem_torch_installed(void);
}
