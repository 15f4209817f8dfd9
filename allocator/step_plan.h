// StepPlanner: serves a training loop's repeating step from a layout planned ahead.
//
// An online policy cannot see when a block will be freed, so its layout strands bytes in
// pages shared by blocks of different lifetimes. A training step repeats, though: the same
// large requests in the same order, freed at the same points. The planner watches the
// large requests (position = count of large allocs and frees since the step began), and
// once two steps in a row made the same requests, packs the blocks of the first by their
// lifetimes as memory planners do (greedy by size: largest first, each at the lowest offset
// free for its whole lifetime; TFLite's planner; tools/replay/offline_plan_bound.py) into
// one address range, the arena. From the next step on, the i-th large request is served at
// its planned offset when its size and stream match and that offset is free; anything
// else goes to the general pools. Lifetimes are circular: a block freed in the next step
// (gradients, freed by the next zero_grad) wraps around the step's end. Blocks that live a
// whole step or more (weights, optimizer state, leaks) stay general.
//
// Arena pages are mapped when a served block first needs them, from the page cache first,
// then from idle pages of the general pools (the caller's `make_room`), then new pages: the
// arena grows out of the memory the first planned step's frees leave idle.
//
// Not thread-safe: the CachingAllocator calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "allocator/backend.h"
#include "allocator/page_heap.h"

namespace gpumem {

// One large request of a recorded step and where the plan puts it.
struct PlannedBlock {
  std::size_t bytes = 0;       // rounded request
  StreamId stream = kDefaultStream;
  std::uint64_t start = 0;     // position of its allocation in the step
  std::uint64_t end = 0;       // position of its free; > step length: in the next step
  bool planned = false;        // served from the arena (lifetime known and < a step)
  std::size_t offset = 0;      // in the arena, when planned
};

// Packs blocks with circular lifetimes on a step of `length` positions (greedy by size);
// sets offset and returns the arena's bytes. Only blocks with `planned` are placed.
std::size_t PackBlocks(std::vector<PlannedBlock>& blocks, std::uint64_t length);

class StepPlanner {
 public:
  // Frees idle pages of the general pools into the page cache, at most `pages`; returns
  // how many.
  using MakeRoom = absl::FunctionRef<std::size_t(std::size_t pages)>;

  explicit StepPlanner(PageHeap& pages);
  ~StepPlanner();
  StepPlanner(const StepPlanner&) = delete;
  StepPlanner& operator=(const StepPlanner&) = delete;

  // A training step ended.
  void StepBoundary();
  // A large request of `bytes` (rounded) on `stream`: its planned address, or 0 to serve
  // it from the general pools (then OnGeneralAlloc follows, if that succeeds).
  DevicePtr Allocate(std::size_t bytes, StreamId stream, MakeRoom make_room);
  void OnGeneralAlloc(DevicePtr ptr, std::size_t bytes, StreamId stream);
  // Every large block's free, when the caller frees it (its position counts).
  void OnFree(DevicePtr ptr);
  // An arena block's bytes are free again (after OnFree, once no stream can still use it).
  void Release(DevicePtr ptr);
  bool Owns(DevicePtr ptr) const;
  // Gives the arena's pages back to the page cache if no block in it is live, and forgets
  // the plan (EmptyCache, or memory pressure). Returns pages unmapped.
  std::size_t ReleaseIfIdle();

  bool active() const { return arena_base_ != 0; }
  std::size_t arena_bytes() const { return arena_bytes_; }
  std::size_t arena_mapped_pages() const { return mapped_count_; }
  std::uint64_t served() const { return served_; }
  std::uint64_t plans_made() const { return plans_made_; }

 private:
  struct Recording {
    std::vector<PlannedBlock> blocks;
    std::uint64_t length = 0;  // positions in the step
    bool complete = false;     // its step has ended
    bool overflow = false;     // too many blocks to keep: never planned
  };
  static bool SameRequests(const Recording& a, const Recording& b);
  void Learn();
  bool Activate(Recording& r);
  void Drop();
  bool MapArena(std::size_t offset, std::size_t bytes, MakeRoom make_room);
  bool ArenaRangeFree(std::size_t offset, std::size_t bytes) const;

  // A step with more large requests than this is not recorded (nor a program that never
  // marks steps, for which one step is the whole run).
  static constexpr std::size_t kMaxBlocks = std::size_t{1} << 16;
  // Steps in a row that may leave the plan before it is dropped (and learned again).
  static constexpr int kMaxMissedSteps = 2;

  PageHeap& pages_;
  const std::size_t page_;
  std::uint64_t position_ = 0;  // large allocs and frees since the step began
  std::size_t index_ = 0;       // large allocs since the step began

  // Learning: the step before and this one; ptr -> (which recording, block index).
  Recording previous_, current_;
  struct Where {
    bool in_current;
    std::size_t index;
  };
  absl::flat_hash_map<DevicePtr, Where> recorded_;

  // Serving.
  std::vector<PlannedBlock> plan_;
  bool deviated_ = false;       // this step left the plan
  bool starved_ = false;        // the arena could not get pages this step
  bool given_up_ = false;       // starved once: no plan again on this device
  int missed_steps_ = 0;        // steps in a row that left it
  DevicePtr arena_base_ = 0;
  std::size_t arena_bytes_ = 0;  // reserved virtual bytes (whole pages)
  std::vector<bool> mapped_;     // per arena page
  std::size_t mapped_count_ = 0;
  absl::btree_map<std::size_t, std::size_t> live_;  // arena offset -> bytes
  std::uint64_t served_ = 0;
  std::uint64_t plans_made_ = 0;
};

}  // namespace gpumem
