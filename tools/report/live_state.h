// The allocator's state as a trace is walked event by event: live blocks, bytes
// allocated and reserved per device, and held address ranges. Every analysis pass
// replays the events through one of these.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "profiler/graph_pool_ledger.h"
#include "tools/report/graph_pools.h"
#include "tools/report/ranges.h"
#include "tools/report/sites.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

struct LiveBlock {
  std::uint64_t size = 0;  // what it takes on the device (DeviceBytes)
  std::uint32_t site = 0;
  std::uint32_t stack = 0;
  std::uint32_t pool = 0;  // 1 + the CUDA graph pool it was captured into, 0 for none
};

struct FreePieces {
  std::uint64_t largest = 0;  // the largest free piece inside held ranges
  std::uint64_t total = 0;    // all free bytes inside held ranges
};

class LiveState {
 public:
  explicit LiveState(const SiteTable& sites)
      : sites_(sites), site_live_(sites.size(), 0), site_low_(sites.size(), 0),
        site_freed_stack_(sites.size(), 0) {}

  // Applies one event. Frees of blocks never seen allocated (a trace that starts
  // mid-run) are counted and otherwise ignored.
  void Apply(const trace::Event& e);
  // A CUDA graph pool's capture or release, before the event it precedes. A pool's blocks
  // count with the site of its first block, and so does the rest of the memory its
  // captures needed until it is released: a kept graph keeps it, free or not. The figures
  // of allocated bytes count blocks alone.
  void ApplyPoolMark(const GraphPoolMark& mark);
  // The stacks of the graph pools' first blocks, whose sites hold the pools.
  std::vector<std::uint64_t> PoolStacks() const { return pools_.Owners(); }

  std::uint64_t allocated() const { return allocated_; }
  std::uint64_t reserved() const { return reserved_; }
  std::uint64_t allocated_on(int device) const;
  std::uint64_t reserved_on(int device) const;
  bool saw_segments() const { return saw_segments_; }
  std::uint64_t unmatched_frees() const { return unmatched_frees_; }
  std::uint64_t reused_addresses() const { return reused_addresses_; }
  // Live bytes per site, indexed by site id.
  const std::vector<std::uint64_t>& site_live() const { return site_live_; }
  // The same on one device (a site's blocks may be spread over several).
  std::vector<std::uint64_t> SiteLiveOn(int device) const;
  // Per site, the least it held since the last ResetLows(): what it kept all through that
  // stretch (a step, for the leak analysis).
  const std::vector<std::uint64_t>& site_low() const { return site_low_; }
  void ResetLows() { site_low_ = site_live_; }
  // Per site, the stack of the block it freed last (0 before its first free).
  const std::vector<std::uint32_t>& site_freed_stack() const { return site_freed_stack_; }

  // Keys are (device << 56) | address.
  const absl::flat_hash_map<std::uint64_t, LiveBlock>& blocks() const { return blocks_; }
  const RangeSet& ranges(int device) const;
  // Free pieces of `device`'s held ranges, between its live blocks.
  FreePieces FreePiecesOn(int device) const;

  static std::uint64_t Key(int device, std::uint64_t addr) {
    return (static_cast<std::uint64_t>(device & 0xff) << 56) | (addr & ((1ull << 56) - 1));
  }
  static int DeviceOfKey(std::uint64_t key) { return static_cast<int>(key >> 56); }
  static std::uint64_t AddrOfKey(std::uint64_t key) { return key & ((1ull << 56) - 1); }

 private:
  struct PerDevice {
    std::uint64_t allocated = 0;
    std::uint64_t reserved = 0;
    RangeSet ranges;
    std::vector<std::uint64_t> site_live;  // by site id; empty until a site holds any
  };
  PerDevice& device(int d);
  void Release(std::uint64_t key, absl::flat_hash_map<std::uint64_t, LiveBlock>::iterator it,
               int device);
  // Apply, one kind of event each.
  void OnAlloc(std::uint64_t key, const trace::Event& e);
  void OnFreeRequested(std::uint64_t key, int device);
  // Releases the block at `key`; false (counted unmatched) when none is live there.
  bool OnFree(std::uint64_t key, int device);
  void OnSegmentAdded(const trace::Event& e);
  void OnSegmentRemoved(const trace::Event& e);
  // A graph pool's idle memory on `device` moved to or from its site.
  void ApplyPoolDelta(const format::GraphPoolLedger::Delta& delta, int device);
  void AddToSite(std::uint32_t site, std::uint64_t bytes, int device);
  void TakeFromSite(std::uint32_t site, std::uint64_t bytes, int device);

  const SiteTable& sites_;
  absl::flat_hash_map<std::uint64_t, LiveBlock> blocks_;
  absl::flat_hash_set<std::uint64_t> pending_free_;  // free_requested, awaiting free_completed
  std::vector<PerDevice> devices_;
  format::GraphPoolLedger pools_;  // owners are stacks
  std::vector<std::uint64_t> site_live_;
  std::vector<std::uint64_t> site_low_;
  std::vector<std::uint32_t> site_freed_stack_;
  std::uint64_t allocated_ = 0;
  std::uint64_t reserved_ = 0;
  std::uint64_t unmatched_frees_ = 0;
  std::uint64_t reused_addresses_ = 0;
  bool saw_segments_ = false;
};

}  // namespace gpumem::report
