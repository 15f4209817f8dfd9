#include "tools/report/live_state.h"

#include <algorithm>

#include "tools/report/verdict_rules.h"

namespace gpumem::report {

using trace::Action;

LiveState::PerDevice& LiveState::device(int d) {
  const std::size_t i = static_cast<std::size_t>(std::clamp(d, 0, 255));
  if (devices_.size() <= i) devices_.resize(i + 1);
  return devices_[i];
}

std::uint64_t LiveState::allocated_on(int d) const {
  return d >= 0 && static_cast<std::size_t>(d) < devices_.size() ? devices_[d].allocated : 0;
}
std::uint64_t LiveState::reserved_on(int d) const {
  return d >= 0 && static_cast<std::size_t>(d) < devices_.size() ? devices_[d].reserved : 0;
}

std::vector<std::uint64_t> LiveState::SiteLiveOn(int d) const {
  std::vector<std::uint64_t> live;
  if (d >= 0 && static_cast<std::size_t>(d) < devices_.size()) live = devices_[d].site_live;
  live.resize(site_live_.size(), 0);
  return live;
}

const RangeSet& LiveState::ranges(int d) const {
  static const RangeSet kEmpty;
  return d >= 0 && static_cast<std::size_t>(d) < devices_.size() ? devices_[d].ranges : kEmpty;
}

void LiveState::Release(std::uint64_t key,
                        absl::flat_hash_map<std::uint64_t, LiveBlock>::iterator it, int d) {
  (void)key;
  const LiveBlock b = it->second;
  blocks_.erase(it);
  allocated_ -= b.size;
  device(d).allocated -= b.size;
  // A pool's idle memory grows by the block first: its site holds the same bytes.
  if (b.pool != 0) ApplyPoolDelta(pools_.BlockChanged(b.pool, b.size, false), d);
  TakeFromSite(b.site, b.size, d);
  site_freed_stack_[b.site] = b.stack;
}

void LiveState::AddToSite(std::uint32_t site, std::uint64_t bytes, int d) {
  site_live_[site] += bytes;
  std::vector<std::uint64_t>& on_device = device(d).site_live;
  if (on_device.empty()) on_device.resize(site_live_.size(), 0);
  on_device[site] += bytes;
}

void LiveState::TakeFromSite(std::uint32_t site, std::uint64_t bytes, int d) {
  site_live_[site] -= bytes;
  site_low_[site] = std::min(site_low_[site], site_live_[site]);
  std::vector<std::uint64_t>& on_device = device(d).site_live;
  if (!on_device.empty()) on_device[site] -= std::min(bytes, on_device[site]);
}

void LiveState::ApplyPoolDelta(const format::GraphPoolLedger::Delta& delta, int d) {
  const std::uint32_t site = sites_.site_of_stack(static_cast<std::uint32_t>(delta.owner));
  if (delta.add != 0) AddToSite(site, delta.add, d);
  if (delta.take != 0) TakeFromSite(site, delta.take, d);
}

void LiveState::ApplyPoolMark(const GraphPoolMark& mark) {
  ApplyPoolDelta(pools_.OnNote(mark.device, mark.note), mark.device);
}

void LiveState::Apply(const trace::Event& e) {
  const std::uint64_t key = Key(e.device, e.addr);
  switch (e.action) {
    case Action::kAlloc:
      return OnAlloc(key, e);
    case Action::kFreeRequested:
      return OnFreeRequested(key, e.device);
    case Action::kFreeCompleted:
      // A free already counted at its request completes; else this is its only event.
      if (pending_free_.erase(key) == 0) OnFree(key, e.device);
      return;
    case Action::kSegmentAlloc:
    case Action::kSegmentMap:
      return OnSegmentAdded(e);
    case Action::kSegmentFree:
    case Action::kSegmentUnmap:
      return OnSegmentRemoved(e);
    default:
      return;
  }
}

void LiveState::OnAlloc(std::uint64_t key, const trace::Event& e) {
  LiveBlock block{DeviceBytes(e.size), sites_.site_of_stack(e.stack_id), e.stack_id, 0};
  if (const std::uint32_t pool = pools_.Capturing(e.device); pool != 0) {
    const auto stack = static_cast<std::uint32_t>(pools_.Join(pool, block.stack));
    block = LiveBlock{block.size, sites_.site_of_stack(stack), stack, pool};
  }
  auto [it, inserted] = blocks_.try_emplace(key, block);
  if (!inserted) {  // an address reused without a free we saw: drop the old block
    ++reused_addresses_;
    Release(key, it, e.device);
    blocks_.try_emplace(key, block);
  }
  pending_free_.erase(key);
  allocated_ += block.size;
  device(e.device).allocated += block.size;
  AddToSite(block.site, block.size, e.device);
  if (block.pool != 0) ApplyPoolDelta(pools_.BlockChanged(block.pool, block.size, true), e.device);
}

void LiveState::OnFreeRequested(std::uint64_t key, int device) {
  if (OnFree(key, device)) pending_free_.insert(key);
}

bool LiveState::OnFree(std::uint64_t key, int device) {
  auto it = blocks_.find(key);
  if (it == blocks_.end()) {
    ++unmatched_frees_;
    return false;
  }
  Release(key, it, device);
  return true;
}

void LiveState::OnSegmentAdded(const trace::Event& e) {
  saw_segments_ = true;
  PerDevice& d = device(e.device);
  d.ranges.Add(e.addr, e.size);
  d.reserved += e.size;
  reserved_ += e.size;
}

void LiveState::OnSegmentRemoved(const trace::Event& e) {
  saw_segments_ = true;
  PerDevice& d = device(e.device);
  d.ranges.Remove(e.addr, e.size);
  const std::uint64_t bytes = std::min(e.size, d.reserved);
  d.reserved -= bytes;
  reserved_ -= bytes;
}

FreePieces LiveState::FreePiecesOn(int d) const {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;  // (addr, end)
  for (const auto& [key, block] : blocks_) {
    if (DeviceOfKey(key) == d) live.emplace_back(AddrOfKey(key), AddrOfKey(key) + block.size);
  }
  std::sort(live.begin(), live.end());
  FreePieces out;
  auto b = live.begin();
  for (const auto& [begin, end] : ranges(d).ranges()) {
    std::uint64_t cursor = begin;
    while (b != live.end() && b->first < begin) ++b;
    for (; b != live.end() && b->first < end; ++b) {
      if (b->first > cursor) {
        out.largest = std::max(out.largest, b->first - cursor);
        out.total += b->first - cursor;
      }
      cursor = std::max(cursor, std::min(b->second, end));
    }
    if (end > cursor) {
      out.largest = std::max(out.largest, end - cursor);
      out.total += end - cursor;
    }
  }
  return out;
}

}  // namespace gpumem::report
