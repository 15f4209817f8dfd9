// Copies between two devices' tensors (nn.DataParallel's scatter and gather, `.to("cuda:1")`).
// gpumem's memory is mapped page by page (CUDA VMM), and a mapping is reachable only from
// the devices granted access to it: enabling peer access as for cudaMalloc's memory is not
// enough, and a plain cudaMemcpyAsync between devices fails where peer access is off.
#include <c10/util/Exception.h>

#include "hooks/gpumem.h"
#include "hooks/torch/gpumem_allocator.h"
#include "hooks/torch/layout.h"

namespace gpumem::torch {

void GpumemAllocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  // cudaDeviceEnablePeerAccess, as the base class does it.
  ::torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator::enablePeerAccess(dev,
                                                                           dev_to_access);
  TORCH_CHECK(gpumem_enable_peer_access(dev_to_access, dev) == 0, LastGpumemError());
}

cudaError_t GpumemAllocator::memcpyAsync(void* dst, int dstDevice, const void* src,
                                         int srcDevice, size_t count, cudaStream_t stream,
                                         bool p2p_enabled) {
  if (p2p_enabled || dstDevice == srcDevice) {
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  }
  // Without peer access only the driver's own path between the devices reaches mapped
  // memory, as PyTorch does for its expandable segments.
  return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
}

}  // namespace gpumem::torch
