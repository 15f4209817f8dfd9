#include "profiler/graph_pool_ledger.h"

#include <algorithm>

namespace gpumem::format {

GraphPoolLedger::Delta GraphPoolLedger::OnNote(std::int32_t device, const GraphPoolNote& note) {
  const std::uint32_t index = numbers_.Number(device, note);
  if (pools_.size() <= index) pools_.resize(index + 1);
  Pool& p = pools_[index];
  std::uint32_t& capturing = capturing_[device];
  switch (note.change) {
    case GraphPoolChange::kCaptureBegins:
      if (p.released) {  // opened again: it holds what its blocks need from now on
        p.released = false;
        p.held = p.live;
      }
      capturing = index + 1;
      return {};
    case GraphPoolChange::kCaptureEnds:
    case GraphPoolChange::kReleased:
      if (capturing == index + 1) capturing = 0;
      if (note.change == GraphPoolChange::kCaptureEnds) return {};
      p.released = true;
      return p.named ? SetIdle(p) : Delta{};
  }
  return {};
}

std::uint32_t GraphPoolLedger::Capturing(std::int32_t device) const {
  const auto it = capturing_.find(device);
  return it == capturing_.end() ? 0 : it->second;
}

std::uint64_t GraphPoolLedger::Join(std::uint32_t pool, std::uint64_t owner) {
  Pool& p = pools_[pool - 1];
  if (!p.named) {
    p.named = true;
    p.owner = owner;
  }
  return p.owner;
}

GraphPoolLedger::Delta GraphPoolLedger::BlockChanged(std::uint32_t pool, std::uint64_t bytes,
                                                     bool added) {
  Pool& p = pools_[pool - 1];
  p.live = added ? p.live + bytes : p.live - std::min(p.live, bytes);
  p.held = std::max(p.held, p.live);
  return SetIdle(p);
}

GraphPoolLedger::Delta GraphPoolLedger::SetIdle(Pool& p) {
  const std::uint64_t idle = p.released ? 0 : p.held - p.live;
  const Delta delta{p.owner, idle > p.idle ? idle - p.idle : 0, idle < p.idle ? p.idle - idle : 0};
  p.idle = idle;
  return delta;
}

std::vector<std::uint64_t> GraphPoolLedger::Owners() const {
  std::vector<std::uint64_t> out;
  for (const Pool& p : pools_) {
    if (p.named) out.push_back(p.owner);
  }
  return out;
}

}  // namespace gpumem::format
