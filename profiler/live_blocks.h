// Live bytes by allocation stack while a trace records: the only per-allocation work of
// the in-process verdict and the early leak warning (profiler/live_view.h). A free names
// only its address, so each live block's stack and size are kept; everything else (sites,
// history, fits) is done at step marks and at an OOM.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "profiler/graph_pool_ledger.h"
#include "tools/report/verdict_rules.h"

namespace gpumem {

// Who allocated: a thread of the training loop (the process's main thread, or one the
// Python package saw run the loop), a thread that runs autograd's backward nodes, or
// another (a loader's, a prefetcher's).
enum class ThreadRole : std::uint8_t { kMain, kBackward, kHelper };

class LiveBlocks {
 public:
  static constexpr int kMaxDevices = 64;

  // device << 32 | stack: what live bytes are counted by.
  static std::uint64_t Key(std::int32_t device, std::uint32_t stack) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(device)) << 32 | stack;
  }

  void OnAlloc(std::int32_t device, std::uint64_t addr, std::uint64_t size, std::uint32_t stack,
               ThreadRole role = ThreadRole::kMain);
  // Frees of blocks never seen (allocated before the trace or while paused) are ignored.
  void OnFree(std::uint64_t addr);
  // A CUDA graph pool's capture or release on `device`: the blocks a capture allocates
  // count under the key of its pool's first block, and so does the rest of the memory its
  // captures needed, free or not, until the pool is released (a kept graph keeps it).
  // Device totals (Live) count blocks alone.
  void OnGraphPool(std::int32_t device, const format::GraphPoolNote& note);
  // The keys that hold graph pools.
  absl::flat_hash_set<std::uint64_t> PoolKeys() const;

  // Live bytes by Key() (keys with none left out).
  absl::flat_hash_map<std::uint64_t, std::uint64_t> ByKey() const;
  // At a step mark: by Key(), the least live during the step that ends now (what was kept
  // all through it, as a leak is; every key with live bytes, even where that is 0), and a
  // new step begins.
  absl::flat_hash_map<std::uint64_t, std::uint64_t> StepLowsByKeyAndStartStep();
  // The keys that have freed a block since the trace began.
  absl::flat_hash_set<std::uint64_t> FreedKeys() const;
  // When each key allocated first and last, in steps: StepLowsByKeyAndStartStep calls
  // before the allocation (a clock that orders allocations a step or more apart).
  struct AllocSteps {
    std::uint32_t first = 0;
    std::uint32_t last = 0;
  };
  absl::flat_hash_map<std::uint64_t, AllocSteps> AllocStepsByKey() const;
  // By Key(), what helper threads' blocks hold (report::HelperKept), for the keys whose
  // first block a helper thread allocated and that hold some now.
  absl::flat_hash_map<std::uint64_t, report::HelperKept> HelperKeptByKey() const;
  std::uint64_t Live(std::int32_t device) const;
  // The most live at once on `device` since the last call; starts again from live now.
  std::uint64_t TakeStepPeak(std::int32_t device);

 private:
  struct Block {
    std::uint64_t key;
    std::uint64_t size;
    std::uint32_t pool = 0;  // 1 + the graph pool it was captured into, 0 for none
  };
  // The main thread's allocations so far at a helper key's first and latest block.
  struct HelperClock {
    std::uint64_t first = 0;
    std::uint64_t last = 0;
  };

  struct Bytes {
    std::uint64_t live = 0;
    std::uint64_t low = 0;  // the least live since the last step mark
    bool freed = false;     // a block of the key was freed
    AllocSteps steps;
    std::uint64_t blocks = 0;  // live blocks
    bool helper = false;       // a helper thread allocated its first block
    HelperClock main_allocs;   // helper keys only
    std::uint64_t first_size = 0;         // the size of its first block
    std::uint64_t first_size_blocks = 0;  // live blocks of that size
    std::uint64_t loop_bytes_at_last = 0;  // its device's loop_allocated at its latest block
  };
  // Blocks sharded by address so that threads allocating at once rarely share a lock;
  // bytes sharded by key, so that a key's least live in a step is over all its blocks
  // (taken while the block's address shard is held: address lock, then key lock).
  struct alignas(64) Shard {
    mutable std::mutex mu;
    absl::flat_hash_map<std::uint64_t, Block> blocks;
  };
  struct alignas(64) KeyShard {
    mutable std::mutex mu;
    absl::flat_hash_map<std::uint64_t, Bytes> by_key;
  };
  void Add(const Block& block, ThreadRole role);
  void Forget(const Block& block);
  struct alignas(64) DeviceLive {
    std::atomic<std::uint64_t> live{0};
    std::atomic<std::uint64_t> peak{0};
    // Bytes the loop's and autograd's threads allocated so far (report::HelperKept).
    std::atomic<std::uint64_t> loop_allocated{0};
  };
  // The device's loop_allocated after a block of `size` that a thread in `role` allocated.
  std::uint64_t CountLoopBytes(std::int32_t device, std::uint64_t size, ThreadRole role);
  static constexpr std::size_t kShards = 32;
  Shard& ShardOf(std::uint64_t addr) {
    return shards_[((addr >> 9) * 0x9E3779B97F4A7C15ull) >> 59];
  }
  KeyShard& KeyShardOf(std::uint64_t key) {
    return key_shards_[(key * 0x9E3779B97F4A7C15ull) >> 59];
  }
  void AddLive(std::int32_t device, std::uint64_t size);
  // A block allocated while `pool` captures: counted under the pool's key.
  Block IntoPool(Block block, std::uint32_t pool);
  // A pool block came or went: its pool's idle memory follows.
  void PoolBlockChanged(const Block& block, bool added);
  // Moves a pool's idle memory to or from its key, outside any block.
  void AdjustKey(const format::GraphPoolLedger::Delta& delta);
  void SubLive(std::int32_t device, std::uint64_t size);

  std::array<Shard, kShards> shards_;
  std::array<KeyShard, kShards> key_shards_;
  // Keys StepLowsByKeyAndStartStep returned last time (the step marks are serialized by
  // LiveView's lock).
  std::size_t last_step_keys_ = 0;
  std::atomic<std::uint32_t> steps_{0};  // StepLowsByKeyAndStartStep calls so far
  // Allocations by the main thread so far: its own line, written by that thread alone.
  alignas(64) std::atomic<std::uint64_t> main_allocs_{0};
  std::array<DeviceLive, kMaxDevices> devices_;
  // Graph pools: rare (a capture, its blocks' allocs and frees, a release). Taken after an
  // address shard's lock and before a key shard's.
  mutable std::mutex pools_mu_;
  format::GraphPoolLedger pools_;  // owners are keys
  // The ledger's Capturing(device), read at every allocation without its lock.
  std::array<std::atomic<std::uint32_t>, kMaxDevices> capturing_{};
};

}  // namespace gpumem
