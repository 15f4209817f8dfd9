// CUDA tensors sent to another process (torch.multiprocessing's queues and pipes, which
// pickle a storage through shareIpcHandle and rebuild it through getIpcDevPtr). The base
// class refuses both; gpumem's pages are mapped page by page, so the receiver maps the
// same pages at addresses of its own (hooks/ipc.h). Both processes run gpumem.
#include <c10/util/Exception.h>

#include <string>

#include "hooks/gpumem.h"
#include "hooks/torch/gpumem_allocator.h"
#include "hooks/torch/layout.h"

namespace gpumem::torch {

cca::ShareableHandle GpumemAllocator::shareIpcHandle(void* ptr) {
  char handle[GPUMEM_IPC_HANDLE_MAX];
  size_t offset = 0;
  const size_t len = gpumem_ipc_share(ptr, 0, -1, handle, sizeof handle, &offset);
  TORCH_CHECK(len > 0, LastGpumemError());
  return cca::ShareableHandle{static_cast<ptrdiff_t>(offset), std::string(handle, len)};
}

std::shared_ptr<void> GpumemAllocator::getIpcDevPtr(std::string handle) {
  void* base = gpumem_ipc_open(handle.data(), handle.size());
  TORCH_CHECK(base != nullptr, LastGpumemError());
  return std::shared_ptr<void>(base, [](void* mapped) {
    if (gpumem_ipc_close(mapped) != 0) {
      TORCH_WARN("gpumem: ", LastGpumemError());
    }
  });
}

}  // namespace gpumem::torch
