#include "hooks/torch/history.h"

#include <c10/util/ApproximateClock.h>

#include <utility>

namespace gpumem::torch {

using Action = cdca::TraceEntry::Action;

void History::Configure(bool enabled, cdca::CreateContextFn recorder, std::size_t max_entries,
                        cdca::RecordContext when, bool clear,
                        const std::vector<std::string>& skip) {
  std::lock_guard<std::mutex> lock(mu_);
  recorder_ = recorder;
  when_.store(enabled ? when : cdca::RecordContext::NEVER, std::memory_order_relaxed);
  max_entries_ = max_entries;
  skip_.assign(static_cast<std::size_t>(Action::OOM) + 1, false);
  for (const std::string& name : skip) {
    skip_[static_cast<std::size_t>(cdca::parseTraceEntryAction(name))] = true;
  }
  if (clear || !enabled) traces_.clear();
  enabled_.store(enabled, std::memory_order_relaxed);
}

std::shared_ptr<c10::GatheredContext> History::Gather(cdca::RecordContext at_least) const {
  cdca::CreateContextFn recorder;
  cdca::RecordContext when;
  {
    std::lock_guard<std::mutex> lock(mu_);
    recorder = recorder_;
    when = when_.load(std::memory_order_relaxed);
  }
  if (recorder == nullptr || when < at_least) return nullptr;
  return recorder();  // outside mu_: it may take the GIL
}

void History::Append(cdca::TraceEntry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled() || max_entries_ == 0 || skip_[static_cast<std::size_t>(entry.action_)]) return;
  std::deque<cdca::TraceEntry>& ring = traces_[entry.device_];
  if (ring.size() >= max_entries_) ring.pop_front();
  ring.push_back(std::move(entry));
}

void History::OnAlloc(void* ptr, std::size_t size, int device, cudaStream_t stream,
                      c10::MempoolId_t pool) {
  auto context = enabled() ? Gather(cdca::RecordContext::STATE) : nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[ptr] = TrackedBlock{size, device, stream, pool, context};
    tracked_.store(blocks_.size(), std::memory_order_relaxed);
  }
  if (!enabled()) return;
  const bool in_trace = when_.load(std::memory_order_relaxed) >= cdca::RecordContext::ALLOC;
  Append(cdca::TraceEntry(Action::ALLOC, static_cast<c10::DeviceIndex>(device),
                          reinterpret_cast<std::size_t>(ptr), size, stream, pool,
                          c10::getApproximateTime(), in_trace ? context : nullptr));
}

TrackedBlock History::OnFree(void* ptr) {
  TrackedBlock block;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return block;
    block = std::move(it->second);
    blocks_.erase(it);
    tracked_.store(blocks_.size(), std::memory_order_relaxed);
  }
  if (!enabled()) return block;
  auto context = Gather(cdca::RecordContext::ALL);
  const auto device = static_cast<c10::DeviceIndex>(block.device);
  const auto addr = reinterpret_cast<std::size_t>(ptr);
  // gpumem defers a free used on other streams internally; to PyTorch's viewers the block
  // is free once requested.
  for (Action action : {Action::FREE_REQUESTED, Action::FREE_COMPLETED}) {
    Append(cdca::TraceEntry(action, device, addr, block.size, block.stream, block.pool,
                            c10::getApproximateTime(), context));
  }
  return block;
}

void History::OnOom(std::size_t size, int device, cudaStream_t stream, std::size_t device_free) {
  if (!enabled()) return;
  // For OOM, PyTorch's TraceEntry keeps the device's free bytes in addr_.
  Append(cdca::TraceEntry(Action::OOM, static_cast<c10::DeviceIndex>(device), device_free, size,
                          stream, {0, 0}, c10::getApproximateTime(),
                          Gather(cdca::RecordContext::ALLOC)));
}

std::shared_ptr<c10::GatheredContext> History::ContextOf(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  return it == blocks_.end() ? nullptr : it->second.context;
}

std::vector<std::vector<cdca::TraceEntry>> History::Traces(int device_count) const {
  std::vector<std::vector<cdca::TraceEntry>> out(static_cast<std::size_t>(device_count));
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [device, ring] : traces_) {
    if (device >= 0 && device < device_count) out[device].assign(ring.begin(), ring.end());
  }
  return out;
}

}  // namespace gpumem::torch
