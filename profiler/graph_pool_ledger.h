// How much memory each CUDA graph pool holds, from its notes (graph_pool_note.h) and its
// blocks: shared by the report (LiveState) and the live view (LiveBlocks), so that both
// count alike. A pool's blocks count with one owner, that of its first block (its stack,
// or the live view's device and stack key), and so does its idle memory, the most its blocks held at once since it opened
// less what they hold now, until the pool is released: a kept graph keeps it, free or not.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "profiler/graph_pool_note.h"

namespace gpumem::format {

class GraphPoolLedger {
 public:
  // A change of an owner's count: add, then take (so that it never dips where the bytes
  // only moved between a pool's blocks and its idle memory).
  struct Delta {
    std::uint64_t owner = 0;
    std::uint64_t add = 0;
    std::uint64_t take = 0;
  };
  // A note on `device`: a capture begins or ends, or a pool is released (whose idle memory
  // leaves its owner: the delta, where there is one).
  Delta OnNote(std::int32_t device, const GraphPoolNote& note);
  // 1 + the pool a capture on `device` fills now, 0 for none.
  std::uint32_t Capturing(std::int32_t device) const;
  // The owner of a block allocated into pool `pool` (1-based) whose own would be `owner`:
  // the pool's first block's.
  std::uint64_t Join(std::uint32_t pool, std::uint64_t owner);
  // A block of the pool came or went (after Join): the change of its idle memory.
  Delta BlockChanged(std::uint32_t pool, std::uint64_t bytes, bool added);
  // The owners of the pools that have blocks.
  std::vector<std::uint64_t> Owners() const;

 private:
  struct Pool {
    bool named = false;
    bool released = false;
    std::uint64_t owner = 0;
    std::uint64_t live = 0;  // its blocks' bytes
    std::uint64_t held = 0;  // the most they took at once since it last opened
    std::uint64_t idle = 0;  // held - live while not released, counted to its owner
  };
  Delta SetIdle(Pool& pool);

  GraphPoolNumbers numbers_;
  std::vector<Pool> pools_;
  absl::flat_hash_map<std::int32_t, std::uint32_t> capturing_;
};

}  // namespace gpumem::format
