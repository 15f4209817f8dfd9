// Private pools as PyTorch drives them: CUDA graph capture (begin/end allocate to pool,
// release at graph reset), torch.cuda.MemPool (create/incref, use count, release), and
// the checks and checkpoints of Inductor's cudagraph trees.
#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_set>
#include <vector>

#include "hooks/gpumem.h"
#include "hooks/torch/gpumem_allocator.h"
#include "hooks/torch/layout.h"

namespace gpumem::torch {
namespace {

struct PoolBlock {
  void* ptr;
  std::size_t size;
  cudaStream_t stream;
};

// The state of a pool's live blocks when a graph was recorded.
struct PoolCheckpoint final : cca::AllocatorState {
  int device = 0;
  c10::MempoolId_t id{0, 0};
  std::uint64_t key = 0;
  std::vector<PoolBlock> blocks;
};

std::vector<void*> LiveBlocks(int device, std::uint64_t key) {
  std::vector<void*> out(64);
  for (;;) {
    const std::size_t n = gpumem_pool_live_blocks(device, key, out.data(), out.size());
    if (n <= out.size()) {
      out.resize(n);
      return out;
    }
    out.resize(n + 64);
  }
}

// The pool's live blocks with their sizes and streams, from the device's layout.
std::vector<PoolBlock> LiveBlockRecords(int device, std::uint64_t key) {
  const Layout l = ReadLayout(device);
  std::vector<PoolBlock> out;
  std::size_t next = 0;
  for (const gpumem_segment_t& seg : l.segments) {
    for (std::uint32_t i = 0; i < seg.block_count; ++i, ++next) {
      const gpumem_block_t& b = l.blocks[next];
      if (seg.pool == key && b.state == 1) {
        out.push_back({reinterpret_cast<void*>(b.address), b.requested_size,
                       reinterpret_cast<cudaStream_t>(seg.stream)});
      }
    }
  }
  return out;
}

}  // namespace

void GpumemAllocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                          std::function<bool(cudaStream_t)> filter) {
  pools_.Begin(device, mempool_id, std::move(filter));
}

void GpumemAllocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  pools_.End(device, mempool_id);
}

void GpumemAllocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  pools_.Release(device, mempool_id);
}

void GpumemAllocator::createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                         std::shared_ptr<cca::CUDAAllocator> allocator) {
  TORCH_CHECK(allocator == nullptr || allocator.get() == this,
              "gpumem serves torch.cuda.MemPool allocations itself: a MemPool with an "
              "allocator of its own (", allocator ? allocator->name() : std::string(),
              ") is not supported under gpumem. Run without gpumem to use it.");
  pools_.Incref(device, mempool_id);
}

int GpumemAllocator::getPoolUseCount(c10::DeviceIndex, c10::MempoolId_t mempool_id) {
  return pools_.UseCount(mempool_id);
}

void GpumemAllocator::setUseOnOOM(c10::DeviceIndex, c10::MempoolId_t, bool) {
  // gpumem does not lend a pool's idle memory to other requests at an OOM: accepted as a
  // hint (MemPool's destructor always calls it).
}

void GpumemAllocator::setNoSplit(c10::DeviceIndex, c10::MempoolId_t) {
  // A layout hint for PyTorch's allocator; gpumem's pools keep their own layout.
}

bool GpumemAllocator::checkPoolLiveAllocations(c10::DeviceIndex device,
                                               c10::MempoolId_t mempool_id,
                                               const std::unordered_set<void*>& expected) {
  const std::uint64_t key = pools_.Key(mempool_id);
  const std::vector<void*> live = key == 0 ? std::vector<void*>{} : LiveBlocks(device, key);
  if (live.size() != expected.size()) return false;
  return std::all_of(live.begin(), live.end(),
                     [&](void* p) { return expected.count(p) != 0; });
}

std::shared_ptr<cca::AllocatorState> GpumemAllocator::getCheckpointState(
    c10::DeviceIndex device, c10::MempoolId_t id) {
  auto state = std::make_shared<PoolCheckpoint>();
  state->device = device;
  state->id = id;
  state->key = pools_.Key(id);
  if (state->key != 0) state->blocks = LiveBlockRecords(device, state->key);
  return state;
}

// As PyTorch's allocator: afterwards exactly the checkpoint's blocks are live in the pool,
// at their addresses. Every block live before is reported freed (a stale storage's
// deleter is then swapped out), every checkpoint block reported allocated (a live
// storage takes its DataPtr). Blocks in both stay where they are.
cca::CheckpointDelta GpumemAllocator::setCheckpointPoolState(
    c10::DeviceIndex device, std::shared_ptr<cca::AllocatorState> pps) {
  auto state = std::dynamic_pointer_cast<PoolCheckpoint>(pps);
  TORCH_CHECK(state != nullptr, "setCheckpointPoolState: not a gpumem checkpoint");
  TORCH_CHECK(state->device == device, "setCheckpointPoolState: checkpoint of another device");
  std::unordered_set<void*> kept;
  for (const PoolBlock& b : state->blocks) kept.insert(b.ptr);
  cca::CheckpointDelta delta;
  const std::uint64_t key = state->key;
  for (void* p : key == 0 ? std::vector<void*>{} : LiveBlocks(device, key)) {
    delta.ptrs_freed.push_back(p);
    if (kept.count(p) == 0) raw_delete(p);
  }
  const std::unordered_set<void*> live_before(delta.ptrs_freed.begin(), delta.ptrs_freed.end());
  for (const PoolBlock& b : state->blocks) {
    if (live_before.count(b.ptr) == 0) {
      void* p = gpumem_alloc_at(b.ptr, static_cast<ssize_t>(b.size), device, b.stream, key);
      TORCH_CHECK(p == b.ptr, "gpumem could not restore a CUDA graph pool's block of ",
                  b.size, " bytes at ", b.ptr, ": that memory is no longer free in the pool");
    }
    delta.dataptrs_allocd.emplace_back(b.ptr, b.ptr, &Delete,
                                       c10::Device(c10::DeviceType::CUDA, device));
  }
  return delta;
}

}  // namespace gpumem::torch
