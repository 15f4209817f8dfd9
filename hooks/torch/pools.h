// PyTorch's private pools (CUDA graph capture, torch.cuda.MemPool) mapped onto gpumem's
// pool numbers: use counts as PyTorch keeps them (a pool's memory goes back once no graph
// or MemPool uses it), and the routes that send an allocation to a pool while a capture or
// use_mem_pool is under way.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace gpumem::torch {

class Pools {
 public:
  // Whether any route is open: only then does an allocation ask Route.
  bool routing() const { return open_routes_.load(std::memory_order_relaxed) != 0; }
  // The pool an allocation on (device, stream) goes to; 0 for the default pool.
  std::uint64_t Route(int device, cudaStream_t stream);

  // beginAllocateToPool: the pool is used (created on first use) and takes the
  // allocations whose stream `filter` accepts until End.
  void Begin(int device, c10::MempoolId_t id, std::function<bool(cudaStream_t)> filter);
  void End(int device, c10::MempoolId_t id);
  // createOrIncrefPool / releasePool: at a use count of 0 gpumem releases the pool's
  // memory (once its last block is freed).
  std::uint64_t Incref(int device, c10::MempoolId_t id);
  void Release(int device, c10::MempoolId_t id);
  int UseCount(c10::MempoolId_t id) const;

  // gpumem's number for a PyTorch pool id (0 if never used), and back.
  std::uint64_t Key(c10::MempoolId_t id) const;
  c10::MempoolId_t IdOf(std::uint64_t key) const;
  // The device a pool was made on (-1 if unknown).
  int DeviceOf(c10::MempoolId_t id) const;

 private:
  struct Pool {
    std::uint64_t key = 0;
    int uses = 0;
    int device = 0;
  };
  struct OpenRoute {
    int device;
    c10::MempoolId_t id;
    std::uint64_t key;
    std::function<bool(cudaStream_t)> filter;
  };
  std::uint64_t IncrefLocked(int device, c10::MempoolId_t id);

  mutable std::mutex mu_;
  std::map<c10::MempoolId_t, Pool> pools_;
  std::map<std::uint64_t, c10::MempoolId_t> ids_;  // kept after release: blocks may outlive it
  std::vector<OpenRoute> routes_;
  std::atomic<int> open_routes_{0};
  std::uint64_t next_key_ = 1;
};

}  // namespace gpumem::torch
