// CUDA tensors sent to another process (torch.multiprocessing, PyTorch's shareIpcHandle
// and getIpcDevPtr): the sender names a block by a handle; the receiver asks the sender for
// the block's pages (ipc_fds.h) and maps them at addresses of its own. Both processes run
// gpumem's allocator; the handle means nothing to PyTorch's own.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumem::hooks::ipc {

// The handle of the `size`-byte block at `ptr` on `device`, and `*offset`, where `ptr`
// lies past the start of the first page the receiver maps. The same block gets the same
// handle until it is freed. `device` < 0 or `size` 0: those of the live block at `ptr`.
absl::StatusOr<std::string> Share(int device, void* ptr, std::size_t size, std::size_t* offset);

// Maps the pages of a block another process shared; the address of its first page.
absl::StatusOr<void*> Open(absl::string_view handle);
// Unmaps what Open mapped at `base`.
absl::Status Close(void* base);

// How many blocks are shared now: read at every free, without a lock or a call.
extern std::atomic<std::size_t> g_shared_blocks;
void ForgetShared(void* ptr);
// Called as a block is freed: a block that was shared is not sent again.
inline void Forget(void* ptr) {
  if (g_shared_blocks.load(std::memory_order_relaxed) != 0) ForgetShared(ptr);
}

}  // namespace gpumem::hooks::ipc
