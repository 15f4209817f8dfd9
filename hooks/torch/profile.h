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
// The program turned PyTorch's memory history on or off (_record_memory_history) while
// gpumem profiles: gpumem's recorder is put back, serving that history too. `when` is a
// RecordContext (0 never .. 3 all); `cpp`: C++ frames in the program's tracebacks.
void UserHistoryChanged(bool on, int when, bool cpp, std::size_t max_entries);

}  // namespace gpumem::torch

extern "C" {
// For ctypes: 0 on success, else -1 with the reason in `err` (snprintf rules).
__attribute__((visibility("default"))) int gpumem_torch_profile(char* err, std::size_t len);
__attribute__((visibility("default"))) int gpumem_torch_profile_user_history(
    int on, int when, int cpp, std::size_t max_entries, char* err, std::size_t len);
}
