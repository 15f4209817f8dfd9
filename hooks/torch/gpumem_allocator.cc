// The hot path, the cache and the cap. Statistics: device_stats.cc; snapshots and
// history: snapshot.cc; pools and checkpoints: pool_hooks.cc; out of memory: oom.cc.
#include "hooks/torch/gpumem_allocator.h"
#include "hooks/torch/layout.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <string>

#include "hooks/gpumem.h"
#include "hooks/torch/autograd_link.h"

namespace gpumem::torch {

GpumemAllocator* GpumemAllocator::instance_ = nullptr;

namespace {

// The base class's own malloc / raw_delete would call these; every path that reaches
// them is overridden, so they only say so if PyTorch ever adds a new one.
void* UnexpectedAlloc(size_t, int, cudaStream_t) {
  TORCH_CHECK(false, "gpumem: an allocation reached CUDAPluggableAllocator::malloc");
}
void UnexpectedFree(void*, size_t, int, cudaStream_t) {
  TORCH_CHECK(false, "gpumem: a free reached CUDAPluggableAllocator's free function");
}

c10::DeviceIndex CurrentDevice() {
  c10::DeviceIndex device = -1;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  return device;
}

}  // namespace

GpumemAllocator::GpumemAllocator() : CUDAPluggableAllocator(&UnexpectedAlloc, &UnexpectedFree) {
  instance_ = this;
}

void* GpumemAllocator::Malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  // PyTorch's allocator hands out no memory for an empty tensor; neither does gpumem.
  if (size == 0) return nullptr;
  if (C10_UNLIKELY(Tracked())) return MallocTracked(size, device, stream);
  if (gpumem_tracing() != 0) LinkNextAllocationToAutograd();
  void* p = gpumem_alloc(static_cast<ssize_t>(size), device, stream);
  if (C10_UNLIKELY(p == nullptr)) RaiseOom(size, device, stream);
  return p;
}

void* GpumemAllocator::MallocTracked(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  const std::uint64_t pool = pools_.routing() ? pools_.Route(device, stream) : 0;
  if (gpumem_tracing() != 0) LinkNextAllocationToAutograd();
  void* p = pool == 0 ? gpumem_alloc(static_cast<ssize_t>(size), device, stream)
                      : gpumem_alloc_in_pool(static_cast<ssize_t>(size), device, stream, pool);
  if (p == nullptr) RaiseOom(size, device, stream);
  const bool profiling = c10::memoryProfilingEnabled();
  if (history_.enabled() || profiling) {
    history_.OnAlloc(p, size, device, stream, pools_.IdOf(pool));
  }
  if (profiling) {
    gpumem_stats_t st{};
    gpumem_stats(device, &st);
    c10::reportMemoryUsageToProfiler(p, static_cast<int64_t>(size), st.allocated_bytes,
                                     st.reserved_bytes,
                                     c10::Device(c10::DeviceType::CUDA, device));
  }
  return p;
}

void GpumemAllocator::Delete(void* ptr) {
  if (C10_UNLIKELY(instance_->history_.tracking() || c10::memoryProfilingEnabled())) {
    DeleteTracked(ptr);
    return;
  }
  gpumem_free(ptr, 0, -1, nullptr);
}

void GpumemAllocator::DeleteTracked(void* ptr) {
  const TrackedBlock block = instance_->history_.OnFree(ptr);
  // An untracked block (allocated before tracking began): gpumem_free finds its device.
  const int device = block.size != 0 ? block.device : -1;
  gpumem_free(ptr, 0, device, nullptr);
  if (block.size != 0 && c10::memoryProfilingEnabled()) {
    gpumem_stats_t st{};
    gpumem_stats(device, &st);
    c10::reportMemoryUsageToProfiler(ptr, -static_cast<int64_t>(block.size), st.allocated_bytes,
                                     st.reserved_bytes,
                                     c10::Device(c10::DeviceType::CUDA,
                                                 static_cast<c10::DeviceIndex>(device)));
  }
}

c10::DataPtr GpumemAllocator::allocate(size_t size) {
  const c10::DeviceIndex device = CurrentDevice();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device);
  void* p = Malloc(size, device, stream);
  return {p, p, &Delete, c10::Device(c10::DeviceType::CUDA, device)};
}

c10::DeleterFnPtr GpumemAllocator::raw_deleter() const { return &Delete; }

void* GpumemAllocator::raw_alloc(size_t nbytes) {
  const c10::DeviceIndex device = CurrentDevice();
  return Malloc(nbytes, device, c10::cuda::getCurrentCUDAStream(device));
}

void* GpumemAllocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  return Malloc(nbytes, CurrentDevice(), stream);
}

void GpumemAllocator::raw_delete(void* ptr) {
  if (ptr != nullptr) Delete(ptr);
}

void GpumemAllocator::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  // As PyTorch's allocator: only blocks it handed out (an empty tensor has none).
  if (ptr.get() == nullptr || ptr.get_deleter() != &Delete) return;
  gpumem_record_stream(ptr.get(), ptr.device().index(), stream.stream());
}

void GpumemAllocator::init(int device_count) {
  gpumem_init(device_count);
  initialized_ = true;
}

double GpumemAllocator::getMemoryFraction(c10::DeviceIndex device) {
  gpumem_stats_t st{};
  if (gpumem_stats(device, &st) != 0 || st.device_total_bytes == 0) return 1.0;
  return static_cast<double>(st.capacity_bytes) / static_cast<double>(st.device_total_bytes);
}

void GpumemAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK(gpumem_set_memory_fraction(fraction, device) == 0, LastGpumemError());
}

void GpumemAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  if (mempool_id.first == 0 && mempool_id.second == 0) {
    gpumem_empty_cache(-1);
    return;
  }
  const std::uint64_t key = pools_.Key(mempool_id);
  int device = pools_.DeviceOf(mempool_id);
  if (device < 0) device = CurrentDevice();
  if (key != 0) gpumem_empty_pool_cache(device, key);
}

void GpumemAllocator::cacheInfo(c10::DeviceIndex device, size_t* largest_block) {
  // cuDNN's benchmark mode sizes its workspace tries by the largest cached piece.
  gpumem_stats_t st{};
  gpumem_stats(device, &st);
  *largest_block = st.largest_free_bytes;
}

}  // namespace gpumem::torch
