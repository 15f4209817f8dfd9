// gpumem as PyTorch's CUDA allocator: a subclass of CUDAPluggableAllocator (still
// registered through changeCurrentAllocator) that completes what the base class refuses:
// PyTorch's memory statistics, snapshots and history, private pools for CUDA graphs and
// torch.cuda.MemPool, checkpointed pool states (Inductor's cudagraph trees), the OOM
// observer, and an alloc/free path that calls gpumem directly (no std::function, no
// metadata map, no lock of its own), and copies between devices whose memory it maps.
// Built against the torch it runs with: the vtable changes between releases.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "hooks/torch/history.h"
#include "hooks/torch/pools.h"

namespace gpumem::torch {

namespace cca = c10::cuda::CUDACachingAllocator;

class GpumemAllocator final : public ::torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator {
 public:
  GpumemAllocator();
  static GpumemAllocator* instance() { return instance_; }

  // The hot path.
  c10::DataPtr allocate(size_t size) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override;

  // Cache and cap.
  void init(int device_count) override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void cacheInfo(c10::DeviceIndex device, size_t* largest_block) override;

  // Copies between devices (peers.cc).
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                          size_t count, cudaStream_t stream, bool p2p_enabled) override;

  // Tensors sent to another process (ipc.cc).
  cca::ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;

  // Statistics.
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;

  // History and snapshots.
  bool isHistoryEnabled() override;
  void recordHistory(bool enabled, cca::CreateContextFn context_recorder,
                     size_t alloc_trace_max_entries, cca::RecordContext when,
                     bool clear_history, const std::vector<std::string>& skip_actions) override;
  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool, bool include_traces) override;
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override;
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override;

  // Private pools.
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override;
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                   bool use_on_oom) override;
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected) override;
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::MempoolId_t id) override;
  cca::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device, std::shared_ptr<cca::AllocatorState> pps) override;

 private:
  // A block for (size, device, stream) from the pool a capture or use_mem_pool routes
  // this stream to, or the default pool; raises OutOfMemoryError when gpumem has none.
  void* Malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream);
  void* MallocTracked(size_t size, c10::DeviceIndex device, cudaStream_t stream);
  [[noreturn]] void RaiseOom(size_t size, c10::DeviceIndex device, cudaStream_t stream);
  static void Delete(void* ptr);
  static void DeleteTracked(void* ptr);
  // Whether any per-call work beyond gpumem's own is on: history, torch.profiler's
  // memory view, a pool taking allocations.
  bool Tracked() const { return history_.enabled() || pools_.routing() || c10::memoryProfilingEnabled(); }

  static GpumemAllocator* instance_;
  History history_;
  Pools pools_;
  std::mutex observers_mu_;
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
};

}  // namespace gpumem::torch
