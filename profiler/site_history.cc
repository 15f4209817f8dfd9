#include "profiler/site_history.h"

#include <algorithm>

namespace gpumem {

void SiteHistory::Push(Ring& ring, std::uint64_t step, std::uint64_t value) const {
  ring.values[head_] = value;
  ring.samples = std::min(ring.samples + 1, kSteps);
  ring.fill.Add(value);
  ring.coarse_sampled = ++ring.since_coarse >= ring.stride;
  if (!ring.coarse_sampled) return;
  ring.since_coarse = 0;
  ring.coarse[ring.coarse_samples] = value;
  ring.coarse_steps[ring.coarse_samples] = step;
  if (++ring.coarse_samples == kSteps) HalveCoarse(ring);
}

void SiteHistory::Add(std::uint64_t step,
                      const absl::flat_hash_map<std::uint64_t, std::uint64_t>& live,
                      const std::vector<std::uint64_t>& pinned) {
  head_ = count_ == 0 ? 0 : (head_ + 1) % kSteps;
  steps_[head_] = step;
  count_ = std::min(count_ + 1, kSteps);
  for (std::uint64_t key : pinned) sites_.try_emplace(key);
  for (auto& [key, ring] : sites_) {
    const auto it = live.find(key);
    Push(ring, step, it == live.end() ? 0 : it->second);
  }
  TakeIn(step, live);
}

void SiteHistory::HalveCoarse(Ring& ring) {
  // Slot i of n kept where n - 1 - i is even: the newest, then every other one back.
  std::size_t kept = 0;
  const std::size_t n = ring.coarse_samples;
  for (std::size_t i = (n - 1) % 2; i < n; i += 2, ++kept) {
    ring.coarse[kept] = ring.coarse[i];
    ring.coarse_steps[kept] = ring.coarse_steps[i];
  }
  ring.coarse_samples = kept;
  ring.stride *= 2;
}

void SiteHistory::TakeIn(std::uint64_t step,
                         const absl::flat_hash_map<std::uint64_t, std::uint64_t>& live) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> newcomers;  // (bytes, key)
  for (const auto& [key, bytes] : live) {
    if (bytes > 0 && !sites_.contains(key)) newcomers.emplace_back(bytes, key);
  }
  if (newcomers.empty()) return;
  std::sort(newcomers.rbegin(), newcomers.rend());
  // The smallest tracked sites (by live bytes now), which newcomers larger than them replace.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> smallest;
  for (const auto& [key, ring] : sites_) {
    if ((key & 0xFFFFFFFFu) != kPinnedLow) smallest.emplace_back(ring.values[head_], key);
  }
  std::sort(smallest.begin(), smallest.end());
  std::size_t next_out = 0;
  for (const auto& [bytes, key] : newcomers) {
    if (sites_.size() >= kMaxSites) {
      if (next_out >= smallest.size() || smallest[next_out].first >= bytes) break;
      sites_.erase(smallest[next_out++].second);
    }
    Ring& ring = sites_[key];
    Push(ring, step, bytes);
  }
}

SiteHistory::Series SiteHistory::Of(std::uint64_t key) const {
  Series out;
  const auto it = sites_.find(key);
  if (it == sites_.end()) return out;
  const Ring& ring = it->second;
  out.steps.reserve(ring.samples);  // called for every site at every step end
  out.live.reserve(ring.samples);
  for (std::size_t i = ring.samples; i > 0; --i) {
    const std::size_t at = (head_ + kSteps - (i - 1)) % kSteps;
    out.steps.push_back(static_cast<double>(steps_[at]));
    out.live.push_back(ring.values[at]);
  }
  return out;
}

SiteHistory::Series SiteHistory::CoarseOf(std::uint64_t key) const {
  Series out;
  const auto it = sites_.find(key);
  if (it == sites_.end()) return out;
  const Ring& ring = it->second;
  out.steps.reserve(ring.coarse_samples);
  out.live.reserve(ring.coarse_samples);
  for (std::size_t i = 0; i < ring.coarse_samples; ++i) {
    out.steps.push_back(static_cast<double>(ring.coarse_steps[i]));
    out.live.push_back(ring.coarse[i]);
  }
  return out;
}

bool SiteHistory::coarse_sampled(std::uint64_t key) const {
  const auto it = sites_.find(key);
  return it != sites_.end() && it->second.coarse_sampled;
}

report::FillLevel SiteHistory::FillOf(std::uint64_t key) const {
  const auto it = sites_.find(key);
  return it == sites_.end() ? report::FillLevel{} : it->second.fill;
}

std::vector<std::uint64_t> SiteHistory::Keys() const {
  std::vector<std::uint64_t> keys;
  for (const auto& [key, ring] : sites_) keys.push_back(key);
  return keys;
}

// A leak of many steps counts all it added by an OOM: where it began is taken from the
// series that reaches back furthest, the rate from the recent one.
std::optional<SiteHistory::FoundGrowth> SiteHistory::GrowthOf(std::uint64_t key,
                                                              double min_growth) const {
  const report::FillLevel fill = FillOf(key);
  std::optional<FoundGrowth> found;
  for (const Series& s : {Of(key), CoarseOf(key)}) {
    const std::optional<report::Growth> g =
        report::RecentSteadyGrowth(s.steps, s.live, min_growth, &fill);
    if (!g) continue;
    const FoundGrowth here{*g, s.live[g->from],
                           static_cast<std::size_t>(s.steps.back() - s.steps[g->from]) + 1};
    if (!found) {
      found = here;
    } else if (here.live_then < found->live_then) {
      found->live_then = here.live_then;
      found->step_ends = here.step_ends;
    }
  }
  return found;
}

}  // namespace gpumem
