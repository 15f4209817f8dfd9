// Per-thread caches in front of the caching allocator's lock (docs/allocator.md, "Thread
// caches"). A thread keeps a few blocks it freed, binned by (stream, block size), and the
// records of the blocks it was handed, so an alloc+free pair on one thread takes only its
// own cache's (uncontended) lock. The allocator owns the pools: a cache only holds blocks
// back from them, and the allocator drains every cache before it grows, trims or reports
// an OOM, so no growth decision sees less free memory than without caches.
//
// Lifetimes: a thread refers to its caches by the allocator's id (unique, never reused),
// never by a pointer to the allocator; the cache itself is shared by the thread and the
// allocator. At thread exit the owner (if it still exists) takes the cache back; an
// allocator being destroyed detaches its caches. Both happen under RegistryMutex().
// Lock order: RegistryMutex() -> the allocator's lock -> a cache's lock.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "allocator/backend.h"
#include "allocator/large_pool.h"
#include "allocator/size_classes.h"
#include "allocator/small_pool.h"

namespace gpumem {

struct StreamHeap;  // the allocator's per-stream pools (caching_allocator_impl.h)

// A block handed out, as the allocator knows it.
struct LiveBlock {
  Block* block = nullptr;      // large blocks
  Slab* slab = nullptr;        // small blocks
  StreamHeap* heap = nullptr;  // the stream it was allocated on
  StreamId stream = kDefaultStream;
  std::size_t requested = 0;
  std::size_t bin = 0;         // the block's bytes: its size class, or the large block's size
  bool pending = false;        // freed, waiting for other streams' events
  bool recorded = false;       // RecordStream'd on another stream: its free takes the lock
  bool borrowed = false;       // of another stream's heap (CachingAllocator::Borrow)
  bool cached = false;         // free, in a thread cache's bin
  bool unseen = false;         // the observer did not take its allocation: nor its free
  int size_class = -1;         // small blocks: their class; -1: large
};

// Held for a few instructions by the owning thread; others take it only to drain the cache
// or to find a block freed on another thread, both rare. Cheaper than std::mutex uncontended
// (one exchange, one store).
class SpinLock {
 public:
  void lock() {
    while (held_.exchange(true, std::memory_order_acquire)) {
      // The holder may have been preempted (more threads than cores): let it run.
      for (int spins = 0; held_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

struct ThreadCacheLimits {
  std::size_t bin_entries = 4;  // blocks per (stream, size) bin
  std::size_t bytes = 0;        // bytes cached; one block of any size is always allowed
};

class ThreadCache;

// Cumulative allocations and frees, in blocks and requested bytes, in all and of small
// blocks (large = all - small). Kept per thread cache and for the locked paths: a pair on
// a cache writes only its own.
struct AllocTally {
  std::uint64_t alloc_count = 0;
  std::uint64_t free_count = 0;
  std::uint64_t alloc_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t small_alloc_count = 0;
  std::uint64_t small_free_count = 0;
  std::uint64_t small_alloc_bytes = 0;
  std::uint64_t small_free_bytes = 0;

  void OnAlloc(std::uint64_t bytes, bool small) {
    ++alloc_count;
    alloc_bytes += bytes;
    if (small) {
      ++small_alloc_count;
      small_alloc_bytes += bytes;
    }
  }
  void OnFree(std::uint64_t bytes, bool small) {
    ++free_count;
    free_bytes += bytes;
    if (small) {
      ++small_free_count;
      small_free_bytes += bytes;
    }
  }
  AllocTally& operator+=(const AllocTally& o) {
    alloc_count += o.alloc_count;
    free_count += o.free_count;
    alloc_bytes += o.alloc_bytes;
    free_bytes += o.free_bytes;
    small_alloc_count += o.small_alloc_count;
    small_free_count += o.small_free_count;
    small_alloc_bytes += o.small_alloc_bytes;
    small_free_bytes += o.small_free_bytes;
    return *this;
  }
};

// The allocator, as a thread's exit sees it.
class ThreadCacheOwner {
 public:
  // Takes back the cache's blocks and records. Called with RegistryMutex() held.
  virtual void DetachThreadCache(ThreadCache* cache) = 0;

 protected:
  ~ThreadCacheOwner() = default;
};

class ThreadCache {
 public:
  ThreadCache(ThreadCacheOwner* owner, ThreadCacheLimits limits)
      : owner_(owner), limits_(limits), limit_(limits.bytes) {}
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  SpinLock& mu() { return mu_; }

  // The rest with mu() held.
  // A cached block for a request of `requested` bytes on `stream`, now live here; false if
  // its bin is empty. `size_class`: the request's small class, or -1 for a large block of
  // `bin` bytes.
  bool Pop(StreamId stream, int size_class, std::size_t bin, std::size_t requested,
           DevicePtr* ptr) {
    StreamBins* sb = Find(stream);
    if (sb == nullptr) return false;
    Bin* b = size_class >= 0 ? &sb->small[size_class] : nullptr;
    if (b == nullptr) {
      auto it = sb->large.find(bin);
      if (it == sb->large.end()) return false;
      b = &it->second;
    }
    if (b->empty()) return false;
    *ptr = b->back();
    b->pop_back();
    LiveBlock& live = records_.find(*ptr)->second;
    live.cached = false;
    if (size_class < 0) {
      ++large_hits_;
      large_bytes_ -= live.bin;
    }
    live.requested = requested;
    bytes_ -= live.bin;
    return true;
  }
  // Records a block handed out by the allocator's locked path.
  void Record(DevicePtr ptr, const LiveBlock& live) { records_.emplace(ptr, live); }
  // The record of a live block handed out here, or null (cached, or not this cache's).
  LiveBlock* FindLive(DevicePtr ptr) {
    auto it = records_.find(ptr);
    return it == records_.end() || it->second.cached ? nullptr : &it->second;
  }
  // Takes a live block's record out (a free): kept as a cached block when its bin and the
  // byte bound have room (true), else erased and copied to `out` (false).
  bool Free(DevicePtr ptr, LiveBlock* live, LiveBlock* out) {
    const bool large = live->size_class < 0;
    // The byte bound counts every block; the adaptive limit only large ones (small blocks
    // sit in slab slots, bounded per class, and rarely hold room a large request needs).
    // Either way one block is always kept.
    if ((bytes_ == 0 || bytes_ + live->bin <= limits_.bytes) &&
        (!large || large_bytes_ == 0 || large_bytes_ + live->bin <= limit_)) {
      StreamBins& sb = Bins(live->stream);
      Bin& b = live->size_class >= 0 ? sb.small[live->size_class] : sb.large[live->bin];
      if (b.size() < limits_.bin_entries) {
        b.push_back(ptr);
        live->cached = true;
        bytes_ += live->bin;
        if (large) {
          ++large_cached_;
          large_bytes_ += live->bin;
        }
        return true;
      }
    }
    *out = *live;
    records_.erase(ptr);
    return false;
  }
  // Any record of `ptr` (live or cached), or null.
  const LiveBlock* FindRecord(DevicePtr ptr) const {
    auto it = records_.find(ptr);
    return it == records_.end() ? nullptr : &it->second;
  }
  // Calls f(ptr, live) for every live (not cached) record.
  template <typename F>
  void ForEachLive(F&& f) const {
    for (const auto& [p, live] : records_) {
      if (!live.cached) f(p, live);
    }
  }
  // Erases a live block's record, copying it to `out`; false if none.
  bool Take(DevicePtr ptr, LiveBlock* out) {
    auto it = records_.find(ptr);
    if (it == records_.end() || it->second.cached) return false;
    *out = it->second;
    records_.erase(it);
    return true;
  }
  // Hands every cached block to `release(ptr, live)`; returns whether there was any.
  template <typename F>
  bool Drain(F&& release) {
    if (bytes_ == 0) return false;
    for (const std::unique_ptr<StreamBins>& sb : streams_) {
      for (Bin& b : sb->small) DrainBin(b, release);
    }
    DrainLarge(release);
    bytes_ = 0;
    return true;
  }
  // Hands the cached large blocks to `release` (the allocator needs room for a large block,
  // which cached small ones rarely make). A cache drained this way before its large blocks
  // were reused much was holding memory others needed: its limit for large blocks halves
  // (one is still kept). One that was reused doubles it again, up to the byte bound.
  template <typename F>
  bool DrainLargeUnderPressure(F&& release) {
    if (large_bytes_ == 0) return false;
    const bool reused = large_hits_ * 2 >= large_cached_;
    limit_ = reused ? std::min(limits_.bytes, std::max(limit_, kMinLimit) * 2) : limit_ / 2;
    large_cached_ = 0;
    large_hits_ = 0;
    return DrainLargeBlocks(release);
  }
  // Hands the cached large blocks to `release`, limits unchanged; whether there were any.
  template <typename F>
  bool DrainLargeBlocks(F&& release) {
    if (large_bytes_ == 0) return false;
    DrainLarge(release);
    return true;
  }
  // Hands every live record to `take(ptr, live)` and forgets it (the thread is exiting).
  template <typename F>
  void TakeAllLive(F&& take) {
    for (const auto& [p, live] : records_) {
      if (!live.cached) take(p, live);
    }
    absl::erase_if(records_, [](const auto& r) { return !r.second.cached; });
  }
  void Clear() {
    large_cached_ = 0;
    large_bytes_ = 0;
    streams_.clear();
    last_ = nullptr;
    records_.clear();
    bytes_ = 0;
  }
  std::size_t cached_bytes() const { return bytes_; }

  // Allocations recorded here and frees of blocks recorded here, on this thread.
  AllocTally tally;
  // Bytes and blocks freed here not yet taken off the allocator's shared totals (its
  // accounting).
  std::uint64_t credit = 0;
  std::uint64_t count_credit = 0;

  // Guarded by RegistryMutex(): null once detached (thread exit or allocator gone).
  ThreadCacheOwner* owner() const { return owner_; }
  void Detach() { owner_ = nullptr; }

 private:
  using Bin = absl::InlinedVector<DevicePtr, 4>;
  struct StreamBins {
    StreamId stream;
    std::array<Bin, SizeClasses::kCount> small;     // by size class
    absl::flat_hash_map<std::size_t, Bin> large;  // by block bytes
  };

  StreamBins* Find(StreamId stream) {
    if (last_ != nullptr && last_->stream == stream) return last_;
    for (const std::unique_ptr<StreamBins>& sb : streams_) {
      if (sb->stream == stream) return last_ = sb.get();
    }
    return nullptr;
  }
  StreamBins& Bins(StreamId stream) {
    if (StreamBins* sb = Find(stream)) return *sb;
    streams_.push_back(std::make_unique<StreamBins>());
    streams_.back()->stream = stream;
    return *(last_ = streams_.back().get());
  }
  static constexpr std::size_t kMinLimit = std::size_t{1} << 20;

  template <typename F>
  void DrainBin(Bin& b, F& release) {
    for (DevicePtr p : b) {
      auto it = records_.find(p);
      bytes_ -= it->second.bin;
      if (it->second.size_class < 0) large_bytes_ -= it->second.bin;
      release(p, it->second);
      records_.erase(it);
    }
    b.clear();
  }
  template <typename F>
  void DrainLarge(F& release) {
    for (const std::unique_ptr<StreamBins>& sb : streams_) {
      for (auto& [size, b] : sb->large) DrainBin(b, release);
      sb->large.clear();
    }
    large_cached_ = 0;
  }

  SpinLock mu_;
  ThreadCacheOwner* owner_;
  ThreadCacheLimits limits_;
  std::size_t limit_;      // bytes it may cache now (DrainLargeUnderPressure)
  std::size_t bytes_ = 0;  // cached
  std::size_t large_bytes_ = 0;   // of which large blocks
  std::size_t large_cached_ = 0;  // large blocks cached since the last drain
  std::size_t large_hits_ = 0;    // ... and reused
  std::vector<std::unique_ptr<StreamBins>> streams_;
  StreamBins* last_ = nullptr;
  // Blocks handed out here and not freed yet, and cached blocks (LiveBlock::cached).
  absl::flat_hash_map<DevicePtr, LiveBlock> records_;
};

// The calling thread's caches, by allocator id.
class ThreadCaches {
 public:
  // This thread's cache for allocator `id`, or null.
  static ThreadCache* Find(std::uint64_t id) {
    if (fast_.id == id) return fast_.cache;
    return FindSlow(id);
  }
  // Makes `cache` this thread's cache for allocator `id`; false once the thread is exiting
  // (its thread-locals are being destroyed): the caller then takes its locked path.
  static bool Add(std::uint64_t id, std::shared_ptr<ThreadCache> cache);
  static bool Exiting() { return fast_.exiting; }
  // From the thread-local destructor: every later lookup on this thread finds nothing.
  static void MarkExiting() { fast_ = {0, nullptr, true}; }
  // A new id for an allocator; ids are never reused.
  static std::uint64_t NewOwnerId();

 private:
  struct Fast {  // trivially destructible: usable while the thread's other locals go away
    std::uint64_t id = 0;
    ThreadCache* cache = nullptr;
    bool exiting = false;
  };
  static ThreadCache* FindSlow(std::uint64_t id);
  static thread_local Fast fast_;
};

// Serializes thread exits, cache creation and allocator destruction.
std::mutex& RegistryMutex();

}  // namespace gpumem
