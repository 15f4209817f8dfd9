// torch.cuda.memory._record_memory_history under gpumem: the contexts PyTorch's recorder
// gathers (CapturedTraceback, stored as given: the snapshot serializer casts them back),
// a ring of trace entries per device in PyTorch's TraceEntry form, and the blocks
// allocated while anything tracks them (history, or torch.profiler's memory view, which
// needs each block's size again at its free).
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpumem::torch {

namespace cdca = c10::CachingDeviceAllocator;

struct TrackedBlock {
  std::size_t size = 0;
  int device = 0;
  cudaStream_t stream = nullptr;
  c10::MempoolId_t pool{0, 0};
  std::shared_ptr<c10::GatheredContext> context;  // when allocated, if history keeps it
};

class History {
 public:
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Whether any block is tracked: a free must then look it up.
  bool tracking() const { return tracked_.load(std::memory_order_relaxed) != 0; }

  void Configure(bool enabled, cdca::CreateContextFn recorder, std::size_t max_entries,
                 cdca::RecordContext when, bool clear, const std::vector<std::string>& skip);

  // Called outside every allocator lock (a context recorder may take the GIL).
  void OnAlloc(void* ptr, std::size_t size, int device, cudaStream_t stream,
               c10::MempoolId_t pool);
  // The block's record, removed; size 0 if it was not tracked.
  TrackedBlock OnFree(void* ptr);
  void OnOom(std::size_t size, int device, cudaStream_t stream, std::size_t device_free);

  std::shared_ptr<c10::GatheredContext> ContextOf(void* ptr) const;
  std::vector<std::vector<cdca::TraceEntry>> Traces(int device_count) const;

 private:
  std::shared_ptr<c10::GatheredContext> Gather(cdca::RecordContext at_least) const;
  void Append(cdca::TraceEntry entry);

  std::atomic<bool> enabled_{false};
  std::atomic<std::size_t> tracked_{0};
  mutable std::mutex mu_;
  cdca::CreateContextFn recorder_ = nullptr;
  std::atomic<cdca::RecordContext> when_{cdca::RecordContext::NEVER};
  std::size_t max_entries_ = 0;
  std::vector<bool> skip_;  // by TraceEntry::Action
  std::unordered_map<int, std::deque<cdca::TraceEntry>> traces_;
  std::unordered_map<void*, TrackedBlock> blocks_;
};

}  // namespace gpumem::torch
