#include "profiler/segment_live_blocks.h"

#include <algorithm>

namespace gpumem {

void SegmentLiveBlocks::Apply(const RawRecord& r, std::uint64_t drain) {
  const Key key{r.device, r.addr};
  if (ApplyDeviceMemory(r)) {
    if (!started_) before_start_.push_back(r);  // replayed over the start (SetStart)
    return;
  }
  if (r.type == format::RecordType::kAlloc) {
    auto freed = unmatched_.find(key);
    if (freed != unmatched_.end() && freed->second.time_ns >= r.time_ns) {
      unmatched_.erase(freed);  // its free came first: it is not live
      return;
    }
    RawRecord kept = r;
    kept.has_autograd = false;  // its forward allocation may be in a dropped segment
    live_[key] = kept;
  } else if (r.type == format::RecordType::kFree) {
    auto it = live_.find(key);
    if (it != live_.end() && it->second.time_ns <= r.time_ns) {
      live_.erase(it);
    } else {
      unmatched_[key] = Unmatched{r.time_ns, drain};
    }
  }
}

bool SegmentLiveBlocks::ApplyDeviceMemory(const RawRecord& r) {
  const Key key{r.device, r.addr};
  switch (r.type) {
    case format::RecordType::kSegmentAlloc: segments_[key] = r; return true;
    case format::RecordType::kSegmentFree: segments_.erase(key); return true;
    case format::RecordType::kMap: Map(r); return true;
    case format::RecordType::kUnmap: Unmap(r); return true;
    case format::RecordType::kCapacity: caps_[r.device] = r; return true;
    default: return false;
  }
}

void SegmentLiveBlocks::Map(const RawRecord& r) {
  Unmap(r);  // a page mapped again replaces what was there
  mapped_[{r.device, r.addr}] = r;
}

// Cuts [addr, addr + size) out of the mapped ranges, keeping the parts around it.
void SegmentLiveBlocks::Unmap(const RawRecord& r) {
  const std::uint64_t a = r.addr, b = r.addr + r.size;
  auto it = mapped_.lower_bound({r.device, a});
  if (it != mapped_.begin()) {
    auto before = std::prev(it);
    if (before->first.first == r.device && before->first.second + before->second.size > a) {
      it = before;
    }
  }
  while (it != mapped_.end() && it->first.first == r.device && it->first.second < b) {
    const RawRecord range = it->second;
    it = mapped_.erase(it);
    const std::uint64_t s = range.addr, e = range.addr + range.size;
    if (s < a) {
      RawRecord left = range;
      left.size = a - s;
      mapped_[{r.device, s}] = left;
    }
    if (e > b) {
      RawRecord right = range;
      right.addr = b;
      right.size = e - b;
      it = mapped_.emplace(Key{r.device, b}, right).first;
      break;
    }
  }
}

void SegmentLiveBlocks::EndDrain(std::uint64_t drain) {
  if (!started_) return;
  absl::erase_if(unmatched_, [&](const auto& e) { return e.second.drain + 2 <= drain; });
}

void SegmentLiveBlocks::SetStart(const std::vector<RawRecord>& start) {
  // Device memory: the start's, then this segment's changes to it so far, in order.
  segments_.clear();
  mapped_.clear();
  caps_.clear();
  for (const RawRecord& b : start) {
    if (b.type != format::RecordType::kAlloc) ApplyDeviceMemory(b);
  }
  for (const RawRecord& r : before_start_) ApplyDeviceMemory(r);
  before_start_.clear();
  for (const RawRecord& b : start) {
    if (b.type != format::RecordType::kAlloc) continue;
    const Key key{b.device, b.addr};
    auto freed = unmatched_.find(key);
    if (freed != unmatched_.end() && freed->second.time_ns >= b.time_ns) {
      unmatched_.erase(freed);
      continue;
    }
    // A block allocated here at its address means it was freed and the address reused.
    live_.try_emplace(key, b);
  }
  started_ = true;
}

std::vector<RawRecord> SegmentLiveBlocks::Live() const {
  std::vector<RawRecord> out;
  out.reserve(live_.size() + segments_.size() + mapped_.size() + caps_.size());
  for (const auto& [device, r] : caps_) out.push_back(r);
  for (const auto& [key, r] : live_) out.push_back(r);
  for (const auto& [key, r] : segments_) out.push_back(r);
  for (const auto& [key, r] : mapped_) {
    RawRecord map = r;
    map.type = format::RecordType::kMap;
    out.push_back(map);
  }
  std::sort(out.begin(), out.end(), [](const RawRecord& a, const RawRecord& b) {
    return a.time_ns < b.time_ns || (a.time_ns == b.time_ns && a.addr < b.addr);
  });
  return out;
}

}  // namespace gpumem
