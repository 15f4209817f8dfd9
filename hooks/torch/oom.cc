// An allocation gpumem could not serve: the OOM observers (torch.cuda.memory's), the
// history, torch.profiler, then PyTorch's OutOfMemoryError in PyTorch's own words with
// gpumem's figures added.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "hooks/gpumem.h"
#include "hooks/torch/gpumem_allocator.h"
#include "hooks/torch/layout.h"

namespace gpumem::torch {
namespace {

std::string Size(std::uint64_t bytes) { return c10::CachingAllocator::format_size(bytes); }

// What the reserved but unallocated memory is when graphs or MemPools hold some of it.
std::string PrivatePoolsNote(std::uint64_t pools_free) {
  if (pools_free == 0) return "";
  return "; " + Size(pools_free) +
         " of the reserved memory is free inside private pools (CUDA graphs or "
         "torch.cuda.MemPool still alive), which only allocations into those pools can use: "
         "a graph kept alive keeps its pool, so drop the graphs no longer replayed, or "
         "capture them into one shared pool (torch.cuda.graph(g, pool=first_graph.pool()))";
}

std::string OomMessage(size_t size, int device, const gpumem_stats_t& st,
                       std::uint64_t pools_free, size_t device_free, size_t device_total) {
  const std::uint64_t in_use = device_total - device_free;
  const std::uint64_t idle = st.reserved_bytes > st.allocated_bytes
                                 ? st.reserved_bytes - st.allocated_bytes
                                 : 0;
  std::string m = "CUDA out of memory. Tried to allocate " + Size(size) + ". GPU " +
                  std::to_string(device) + " has a total capacity of " + Size(device_total) +
                  " of which " + Size(device_free) +
                  " is free. Including non-PyTorch memory, this process has " + Size(in_use) +
                  " memory in use. Of the allocated memory " + Size(st.allocated_bytes) +
                  " is allocated by PyTorch, and " + Size(idle) +
                  " is reserved by PyTorch but unallocated. gpumem: cap " +
                  Size(st.capacity_bytes) + ", largest free piece " +
                  Size(st.largest_free_bytes) + PrivatePoolsNote(pools_free) +
                  "; cached memory was released and idle pages defragmented before this "
                  "error, so the live tensors" +
                  std::string(pools_free == 0 ? "" : " and the pools") +
                  " alone do not fit (a leak or a genuine peak: `gpumem report` on this run's "
                  "trace tells which).";
  return m;
}

}  // namespace

void GpumemAllocator::RaiseOom(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  gpumem_stats_t st{};
  const std::string why = LastGpumemError();
  // Not an out-of-memory: gpumem could not start, or CUDA refused for another reason.
  TORCH_CHECK(gpumem_stats(device, &st) == 0 && why.find(" failed: ") == std::string::npos,
              why);
  size_t device_free = 0;
  size_t device_total = 0;
  {
    c10::cuda::CUDAGuard guard(device);
    if (cudaMemGetInfo(&device_free, &device_total) != cudaSuccess) {
      (void)cudaGetLastError();  // a capture in progress may refuse it: report what we know
      device_total = st.device_total_bytes;
    }
  }
  std::vector<cca::OutOfMemoryObserver> observers;
  {
    std::lock_guard<std::mutex> lock(observers_mu_);
    observers = oom_observers_;
  }
  for (const auto& observer : observers) {
    observer(device, st.allocated_bytes, device_total, device_free);
  }
  history_.OnOom(size, device, stream, device_free);
  c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(size), st.allocated_bytes,
                                   st.reserved_bytes,
                                   c10::Device(c10::DeviceType::CUDA, device));
  TORCH_CHECK_WITH(OutOfMemoryError, false,
                   OomMessage(size, device, st, gpumem_private_pools_free(device),
                              device_free, device_total));
}

}  // namespace gpumem::torch
