#include "hooks/torch/pools.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

#include "hooks/gpumem.h"

namespace gpumem::torch {

std::uint64_t Pools::Route(int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  // The newest route first, as PyTorch does: a capture nested in use_mem_pool wins.
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (it->device == device && it->filter(stream)) return it->key;
  }
  return 0;
}

void Pools::Begin(int device, c10::MempoolId_t id, std::function<bool(cudaStream_t)> filter) {
  std::uint64_t key;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const OpenRoute& r : routes_) {
      TORCH_CHECK(!(r.device == device && r.id == id),
                  "beginAllocateToPool: already recording to mempool_id");
    }
    key = IncrefLocked(device, id);
    routes_.push_back({device, id, key, std::move(filter)});
    open_routes_.fetch_add(1, std::memory_order_relaxed);
  }
  // From here until End the allocator makes no call that would break a stream capture.
  gpumem_capture_begin(device);
}

void Pools::End(int device, c10::MempoolId_t id) {
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(routes_.begin(), routes_.end(), [&](const OpenRoute& r) {
      return r.device == device && r.id == id;
    });
    if (it != routes_.end()) {
      routes_.erase(it);
      open_routes_.fetch_sub(1, std::memory_order_relaxed);
      found = true;
    }
  }
  TORCH_CHECK(found, "endAllocateToPool: not currently recording to mempool_id");
  gpumem_capture_end(device);
}

std::uint64_t Pools::Incref(int device, c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return IncrefLocked(device, id);
}

std::uint64_t Pools::IncrefLocked(int device, c10::MempoolId_t id) {
  Pool& p = pools_[id];
  if (p.key == 0) {
    p.key = next_key_++;
    p.device = device;
    ids_[p.key] = id;
  }
  ++p.uses;
  return p.key;
}

void Pools::Release(int device, c10::MempoolId_t id) {
  std::uint64_t freeable = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(id);
    TORCH_CHECK(it != pools_.end(), "releasePool: no pool with this mempool_id");
    if (--it->second.uses == 0) {
      freeable = it->second.key;
      pools_.erase(it);
    }
  }
  if (freeable != 0) gpumem_release_pool(device, freeable);
}

int Pools::UseCount(c10::MempoolId_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(id);
  return it == pools_.end() ? 0 : it->second.uses;
}

std::uint64_t Pools::Key(c10::MempoolId_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = pools_.find(id); it != pools_.end()) return it->second.key;
  // A released pool still has a number: its blocks may outlive it.
  for (const auto& [key, known] : ids_) {
    if (known == id) return key;
  }
  return 0;
}

c10::MempoolId_t Pools::IdOf(std::uint64_t key) const {
  if (key == 0) return {0, 0};
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(key);
  return it == ids_.end() ? c10::MempoolId_t{0, key} : it->second;
}

int Pools::DeviceOf(c10::MempoolId_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(id);
  return it == pools_.end() ? -1 : it->second.device;
}

}  // namespace gpumem::torch
