#include "profiler/segment_live_blocks.h"

#include <algorithm>

namespace gpumem {

void SegmentLiveBlocks::Apply(const RawRecord& r, std::uint64_t drain) {
  const Key key{r.device, r.addr};
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

void SegmentLiveBlocks::EndDrain(std::uint64_t drain) {
  if (!started_) return;
  absl::erase_if(unmatched_, [&](const auto& e) { return e.second.drain + 2 <= drain; });
}

void SegmentLiveBlocks::SetStart(const std::vector<RawRecord>& start) {
  for (const RawRecord& b : start) {
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
  out.reserve(live_.size());
  for (const auto& [key, r] : live_) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const RawRecord& a, const RawRecord& b) {
    return a.time_ns < b.time_ns || (a.time_ns == b.time_ns && a.addr < b.addr);
  });
  return out;
}

}  // namespace gpumem
