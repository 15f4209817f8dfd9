#include "profiler/live_blocks.h"

#include <algorithm>

#include "tools/report/verdict_rules.h"

namespace gpumem {
namespace {
bool InRange(std::int32_t device) { return device >= 0 && device < LiveBlocks::kMaxDevices; }
}  // namespace

void LiveBlocks::AddLive(std::int32_t device, std::uint64_t size) {
  if (!InRange(device)) return;
  DeviceLive& d = devices_[device];
  const std::uint64_t now = d.live.fetch_add(size, std::memory_order_relaxed) + size;
  std::uint64_t peak = d.peak.load(std::memory_order_relaxed);
  while (now > peak && !d.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void LiveBlocks::SubLive(std::int32_t device, std::uint64_t size) {
  if (InRange(device)) devices_[device].live.fetch_sub(size, std::memory_order_relaxed);
}

std::uint64_t LiveBlocks::CountLoopBytes(std::int32_t device, std::uint64_t size,
                                         ThreadRole role) {
  if (!InRange(device)) return 0;
  std::atomic<std::uint64_t>& loop = devices_[device].loop_allocated;
  if (role == ThreadRole::kHelper) return loop.load(std::memory_order_relaxed);
  return loop.fetch_add(size, std::memory_order_relaxed) + size;
}

void LiveBlocks::Add(const Block& block, ThreadRole role) {
  KeyShard& shard = KeyShardOf(block.key);
  const std::uint32_t now = steps_.load(std::memory_order_relaxed);
  const std::uint64_t loop_bytes =
      CountLoopBytes(static_cast<std::int32_t>(block.key >> 32), block.size, role);
  const std::uint64_t main_allocs =
      role == ThreadRole::kMain ? main_allocs_.fetch_add(1, std::memory_order_relaxed) + 1
                                : main_allocs_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(shard.mu);
  // A key's entry begins at its first block: the others (frees, a pool's idle memory) come
  // after one.
  auto [it, first] = shard.by_key.try_emplace(block.key);
  Bytes& bytes = it->second;
  bytes.live += block.size;
  ++bytes.blocks;
  if (first) {
    bytes.steps.first = now;
    bytes.helper = role == ThreadRole::kHelper;
    bytes.main_allocs.first = main_allocs;
    bytes.first_size = block.size;
  }
  bytes.first_size_blocks += block.size == bytes.first_size;
  bytes.steps.last = now;
  bytes.main_allocs.last = main_allocs;
  bytes.loop_bytes_at_last = loop_bytes;
}

void LiveBlocks::Forget(const Block& block) {
  KeyShard& shard = KeyShardOf(block.key);
  std::lock_guard<std::mutex> lock(shard.mu);
  Bytes& bytes = shard.by_key[block.key];
  bytes.live -= block.size;
  bytes.low = std::min(bytes.low, bytes.live);
  bytes.freed = true;
  --bytes.blocks;
  bytes.first_size_blocks -= block.size == bytes.first_size;
}

void LiveBlocks::OnAlloc(std::int32_t device, std::uint64_t addr, std::uint64_t size,
                         std::uint32_t stack, ThreadRole role) {
  Block block{Key(device, stack), report::DeviceBytes(size)};
  if (InRange(device)) {
    if (const std::uint32_t pool = capturing_[device].load(std::memory_order_relaxed); pool != 0) {
      block = IntoPool(block, pool);
    }
  }
  Shard& shard = ShardOf(addr);
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto [it, inserted] = shard.blocks.try_emplace(addr, block);
    if (!inserted) {  // a free we never saw: the old block is gone
      if (it->second.pool != 0) PoolBlockChanged(it->second, false);
      Forget(it->second);
      SubLive(static_cast<std::int32_t>(it->second.key >> 32), it->second.size);
      it->second = block;
    }
    Add(block, role);
    if (block.pool != 0) PoolBlockChanged(block, true);
  }
  AddLive(device, block.size);
}

void LiveBlocks::OnFree(std::uint64_t addr) {
  Shard& shard = ShardOf(addr);
  Block block;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.blocks.find(addr);
    if (it == shard.blocks.end()) return;
    block = it->second;
    shard.blocks.erase(it);
    // The pool's idle memory grows by the block first: its key holds the same bytes.
    if (block.pool != 0) PoolBlockChanged(block, false);
    Forget(block);
  }
  SubLive(static_cast<std::int32_t>(block.key >> 32), block.size);
}

void LiveBlocks::AdjustKey(const format::GraphPoolLedger::Delta& delta) {
  if (delta.add == 0 && delta.take == 0) return;
  KeyShard& shard = KeyShardOf(delta.owner);
  std::lock_guard<std::mutex> lock(shard.mu);
  Bytes& bytes = shard.by_key[delta.owner];
  bytes.live = bytes.live + delta.add - delta.take;
  bytes.low = std::min(bytes.low, bytes.live);
}

LiveBlocks::Block LiveBlocks::IntoPool(Block block, std::uint32_t pool) {
  std::lock_guard<std::mutex> lock(pools_mu_);
  return Block{pools_.Join(pool, block.key), block.size, pool};
}

void LiveBlocks::PoolBlockChanged(const Block& block, bool added) {
  std::lock_guard<std::mutex> lock(pools_mu_);
  AdjustKey(pools_.BlockChanged(block.pool, block.size, added));
}

void LiveBlocks::OnGraphPool(std::int32_t device, const format::GraphPoolNote& note) {
  if (!InRange(device)) return;
  std::lock_guard<std::mutex> lock(pools_mu_);
  AdjustKey(pools_.OnNote(device, note));
  capturing_[device].store(pools_.Capturing(device), std::memory_order_relaxed);
}

absl::flat_hash_set<std::uint64_t> LiveBlocks::PoolKeys() const {
  std::lock_guard<std::mutex> lock(pools_mu_);
  const std::vector<std::uint64_t> owners = pools_.Owners();
  return absl::flat_hash_set<std::uint64_t>(owners.begin(), owners.end());
}

absl::flat_hash_map<std::uint64_t, std::uint64_t> LiveBlocks::ByKey() const {
  absl::flat_hash_map<std::uint64_t, std::uint64_t> out;
  for (const KeyShard& shard : key_shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [key, bytes] : shard.by_key) {
      if (bytes.live != 0) out[key] = bytes.live;
    }
  }
  return out;
}

absl::flat_hash_set<std::uint64_t> LiveBlocks::FreedKeys() const {
  absl::flat_hash_set<std::uint64_t> out;
  for (const KeyShard& shard : key_shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [key, bytes] : shard.by_key) {
      if (bytes.freed) out.insert(key);
    }
  }
  return out;
}

absl::flat_hash_map<std::uint64_t, LiveBlocks::AllocSteps> LiveBlocks::AllocStepsByKey() const {
  absl::flat_hash_map<std::uint64_t, AllocSteps> out;
  for (const KeyShard& shard : key_shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [key, bytes] : shard.by_key) out[key] = bytes.steps;
  }
  return out;
}

absl::flat_hash_map<std::uint64_t, std::uint64_t> LiveBlocks::StepLowsByKeyAndStartStep() {
  absl::flat_hash_map<std::uint64_t, std::uint64_t> out;
  out.reserve(last_step_keys_);  // about as many as the step before: no rehash as it fills
  for (KeyShard& shard : key_shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (auto& [key, bytes] : shard.by_key) {
      if (bytes.live != 0) out[key] = bytes.low;
      bytes.low = bytes.live;
    }
  }
  last_step_keys_ = out.size();
  steps_.fetch_add(1, std::memory_order_relaxed);
  return out;
}

absl::flat_hash_map<std::uint64_t, report::HelperKept> LiveBlocks::HelperKeptByKey() const {
  absl::flat_hash_map<std::uint64_t, report::HelperKept> out;
  for (const KeyShard& shard : key_shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [key, bytes] : shard.by_key) {
      if (!bytes.helper || bytes.blocks == 0) continue;
      const std::int32_t device = static_cast<std::int32_t>(key >> 32);
      const std::uint64_t loop_now =
          InRange(device) ? devices_[device].loop_allocated.load(std::memory_order_relaxed) : 0;
      out[key] = {bytes.live, bytes.blocks, bytes.main_allocs.last - bytes.main_allocs.first,
                  bytes.first_size_blocks, loop_now - bytes.loop_bytes_at_last};
    }
  }
  return out;
}

std::uint64_t LiveBlocks::Live(std::int32_t device) const {
  return InRange(device) ? devices_[device].live.load(std::memory_order_relaxed) : 0;
}

std::uint64_t LiveBlocks::TakeStepPeak(std::int32_t device) {
  if (!InRange(device)) return 0;
  DeviceLive& d = devices_[device];
  return d.peak.exchange(d.live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace gpumem
