#include "allocator/step_plan.h"

#include <algorithm>
#include <utility>

namespace gpumem {
namespace {

// A lifetime on a circle of `length` positions as at most two plain intervals.
struct Pieces {
  std::uint64_t lo[2], hi[2];
  int n;
};

Pieces PiecesOf(const PlannedBlock& b, std::uint64_t length) {
  if (b.end <= length) return {{b.start, 0}, {b.end, 0}, 1};
  return {{b.start, 0}, {length, b.end - length}, 2};
}

bool Overlap(const Pieces& a, const Pieces& b) {
  for (int i = 0; i < a.n; ++i) {
    for (int j = 0; j < b.n; ++j) {
      if (a.lo[i] < b.hi[j] && b.lo[j] < a.hi[i]) return true;
    }
  }
  return false;
}

}  // namespace

std::size_t PackBlocks(std::vector<PlannedBlock>& blocks, std::uint64_t length) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].planned) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return blocks[a].bytes > blocks[b].bytes;
  });
  std::vector<Pieces> pieces(blocks.size());
  for (std::size_t i : order) pieces[i] = PiecesOf(blocks[i], length);
  std::vector<std::size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> taken;  // [offset, end) alive with it
  std::size_t top = 0;
  for (std::size_t i : order) {
    taken.clear();
    for (std::size_t j : placed) {
      if (Overlap(pieces[i], pieces[j])) {
        taken.emplace_back(blocks[j].offset, blocks[j].offset + blocks[j].bytes);
      }
    }
    std::sort(taken.begin(), taken.end());
    std::size_t offset = 0;
    for (const auto& [lo, hi] : taken) {
      if (offset + blocks[i].bytes <= lo) break;
      offset = std::max(offset, hi);
    }
    blocks[i].offset = offset;
    top = std::max(top, offset + blocks[i].bytes);
    placed.push_back(i);
  }
  return top;
}

StepPlanner::StepPlanner(PageHeap& pages) : pages_(pages), page_(pages.page_bytes()) {}

StepPlanner::~StepPlanner() {
  // The allocator has waited for the device; blocks still live in the arena were leaked
  // by their owner and go with it.
  if (arena_base_ != 0) {
    pages_.UnmapRange(arena_base_, arena_bytes_);
    pages_.ReleaseRange(arena_base_, arena_bytes_);
  }
}

void StepPlanner::StepBoundary() {
  if (!plan_.empty()) {
    const bool missed = deviated_ || index_ != plan_.size();
    missed_steps_ = missed ? missed_steps_ + 1 : 0;
    // A device too full for the arena would have it mapped and dropped over and over.
    if (starved_) given_up_ = true;
    if (missed_steps_ >= kMaxMissedSteps || given_up_) Drop();
  } else if (!given_up_) {
    Learn();
  }
  position_ = 0;
  index_ = 0;
  deviated_ = false;
}

// At the end of a step while learning: plan from the step before if this one repeated
// its requests; otherwise this step becomes the one to compare the next with.
void StepPlanner::Learn() {
  current_.length = position_;
  current_.complete = true;
  if (previous_.complete && !previous_.overflow && !current_.overflow &&
      !previous_.blocks.empty() && SameRequests(previous_, current_) &&
      arena_base_ == 0 && Activate(previous_)) {
    recorded_.clear();  // blocks still live are the general pools'; nothing to learn now
    previous_ = Recording{};
    current_ = Recording{};
    return;
  }
  previous_ = std::move(current_);
  current_ = Recording{};
  for (auto it = recorded_.begin(); it != recorded_.end();) {
    if (!it->second.in_current) {
      recorded_.erase(it++);  // lived two steps: not plannable, nothing to wait for
    } else {
      it->second.in_current = false;
      ++it;
    }
  }
}

bool StepPlanner::SameRequests(const Recording& a, const Recording& b) {
  if (a.blocks.size() != b.blocks.size()) return false;
  for (std::size_t i = 0; i < a.blocks.size(); ++i) {
    if (a.blocks[i].bytes != b.blocks[i].bytes || a.blocks[i].stream != b.blocks[i].stream) {
      return false;
    }
  }
  return true;
}

bool StepPlanner::Activate(Recording& r) {
  bool any = false;
  for (PlannedBlock& b : r.blocks) {
    b.planned = b.end > b.start && b.end - b.start < r.length;
    any |= b.planned;
  }
  if (!any) return false;
  const std::size_t packed = PackBlocks(r.blocks, r.length);
  const std::size_t bytes = (packed + page_ - 1) / page_ * page_;
  absl::StatusOr<DevicePtr> base = pages_.ReserveRange(bytes);
  if (!base.ok()) return false;
  arena_base_ = *base;
  arena_bytes_ = bytes;
  mapped_.assign(bytes / page_, false);
  mapped_count_ = 0;
  plan_ = std::move(r.blocks);
  missed_steps_ = 0;
  ++plans_made_;
  return true;
}

// Stops serving; the arena goes once its last block is released.
void StepPlanner::Drop() {
  plan_.clear();
  if (live_.empty()) ReleaseIfIdle();
}

DevicePtr StepPlanner::Allocate(std::size_t bytes, StreamId stream, MakeRoom make_room) {
  const std::size_t i = index_++;
  ++position_;
  if (plan_.empty() || deviated_) return 0;
  if (i >= plan_.size() || plan_[i].bytes != bytes || plan_[i].stream != stream) {
    deviated_ = true;  // the step left the plan: the rest of it goes to the general pools
    return 0;
  }
  const PlannedBlock& b = plan_[i];
  if (!b.planned) return 0;
  // Taken: a block outlived its plan (or a free waits for another stream).
  if (!ArenaRangeFree(b.offset, b.bytes)) {
    deviated_ = true;
    return 0;
  }
  if (!MapArena(b.offset, b.bytes, make_room)) {
    deviated_ = starved_ = true;
    return 0;
  }
  live_.emplace(b.offset, b.bytes);
  ++served_;
  return arena_base_ + b.offset;
}

void StepPlanner::OnGeneralAlloc(DevicePtr ptr, std::size_t bytes, StreamId stream) {
  if (!plan_.empty() || given_up_ || current_.overflow) return;
  if (current_.blocks.size() >= kMaxBlocks) {
    current_.overflow = true;
    return;
  }
  current_.blocks.push_back({.bytes = bytes, .stream = stream, .start = position_ - 1});
  recorded_[ptr] = Where{true, current_.blocks.size() - 1};
}

void StepPlanner::OnFree(DevicePtr ptr) {
  const std::uint64_t at = position_++;
  if (recorded_.empty()) return;
  auto it = recorded_.find(ptr);
  if (it == recorded_.end()) return;
  if (it->second.in_current) {
    current_.blocks[it->second.index].end = at;
  } else {
    previous_.blocks[it->second.index].end = previous_.length + at;
  }
  recorded_.erase(it);
}

void StepPlanner::Release(DevicePtr ptr) {
  live_.erase(static_cast<std::size_t>(ptr - arena_base_));
  if (plan_.empty() && live_.empty()) ReleaseIfIdle();
}

bool StepPlanner::Owns(DevicePtr ptr) const {
  return arena_base_ != 0 && ptr >= arena_base_ && ptr < arena_base_ + arena_bytes_;
}

bool StepPlanner::ArenaRangeFree(std::size_t offset, std::size_t bytes) const {
  auto next = live_.lower_bound(offset);
  if (next != live_.end() && next->first < offset + bytes) return false;
  if (next == live_.begin()) return true;
  auto prev = std::prev(next);
  return prev->first + prev->second <= offset;
}

bool StepPlanner::MapArena(std::size_t offset, std::size_t bytes, MakeRoom make_room) {
  const std::size_t first = offset / page_, last = (offset + bytes - 1) / page_;
  std::size_t missing = 0;
  for (std::size_t p = first; p <= last; ++p) missing += mapped_[p] ? 0 : 1;
  if (missing == 0) return true;
  // Idle pages of the general pools before new ones: the arena is made of what the
  // general pools no longer use, so planning does not raise what is reserved.
  if (pages_.cached_pages() < missing) make_room(missing - pages_.cached_pages());
  for (std::size_t p = first; p <= last;) {
    if (mapped_[p]) {
      ++p;
      continue;
    }
    std::size_t run = 1;
    while (p + run <= last && !mapped_[p + run]) ++run;
    if (!pages_.MapPages(arena_base_ + p * page_, run).ok()) return false;
    for (std::size_t k = p; k < p + run; ++k) mapped_[k] = true;
    mapped_count_ += run;
    p += run;
  }
  return true;
}

std::size_t StepPlanner::ReleaseIfIdle() {
  if (arena_base_ == 0 || !live_.empty()) return 0;
  const std::size_t unmapped = mapped_count_;
  if (unmapped > 0) {
    pages_.BeginSlowPath();  // pending work may still use arena pages: wait for it
    for (std::size_t p = 0; p < mapped_.size(); ++p) {
      if (mapped_[p]) pages_.UnmapPage(arena_base_ + p * page_);
    }
  }
  pages_.ReleaseRange(arena_base_, arena_bytes_);
  arena_base_ = 0;
  arena_bytes_ = 0;
  mapped_.clear();
  mapped_count_ = 0;
  plan_.clear();
  return unmapped;
}

}  // namespace gpumem
