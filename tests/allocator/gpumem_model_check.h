// The randomized model check of the gpumem policy against a trivial reference (used by
// gpumem_model_check_test and, with faults injected, gpumem_fault_model_check_test):
// random sequences of allocations, frees, record_stream, stream progress and cache
// emptying on several streams, with events that complete only when the test says so.
// After every step: live blocks never overlap and are accessible; a block never reuses
// memory that work queued on another stream may still touch (unless its stream was made
// to wait for that work), at its address or through the physical page mapped elsewhere
// (a stitch lends pages); pages are never unmapped under live blocks or queued work; the
// accounting is exact. At the end everything is freed and the cache emptied: nothing is
// held. With `background`, lent pages are unmapped on the allocator's own thread
// (background_unmap): those unmaps are checked there, against the model under a lock
// that its changes take too, and every live block is checked to be accessible after every
// step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/fault_injecting_backend.h"
#include "allocator/sim_backend.h"
#include "allocator/size_classes.h"
#include "tests/allocator/gpumem_checked_backend.h"

namespace gpumem::testing {

constexpr int kStreams = 3;
// Small, so the bound is reached and checked (the default would hold most of a sequence).
constexpr std::size_t kCacheBytes = std::size_t{8} << 20;

struct LiveBlock {
  std::size_t size;
  StreamId stream;
  std::set<StreamId> used_on;  // RecordStream
};

inline bool Overlaps(DevicePtr a, std::size_t as, DevicePtr b, std::size_t bs) {
  as = std::max<std::size_t>(as, 1);
  bs = std::max<std::size_t>(bs, 1);
  return a < b + bs && b < a + as;
}

// Memory freed while work queued on these streams may still touch it.
struct Dirty {
  DevicePtr ptr;
  std::size_t size;
  std::set<StreamId> streams;
  std::vector<SimBackend::Piece> physical;  // what backed it when freed
  std::uint64_t freed_at;                   // the model's clock then
};

// Per stream, the work of other streams that its work queued from now on runs after
// (through stream waits, transitively): stream -> the clock when that work was queued.
using StreamClock = std::map<StreamId, std::uint64_t>;

inline bool SharePhysical(const std::vector<SimBackend::Piece>& a,
                   const std::vector<SimBackend::Piece>& b) {
  for (const auto& x : a) {
    for (const auto& y : b) {
      if (x.handle == y.handle && Overlaps(x.offset, x.bytes, y.offset, y.bytes)) return true;
    }
  }
  return false;
}

// What observers (a trace, a report) take to be mapped: pages mapped minus unmapped.
struct ObservedMapping final : AllocatorObserver {
  void OnEvent(const AllocatorEvent& e) override {
    if (e.kind == AllocatorEventKind::kMap) bytes += e.bytes;
    if (e.kind == AllocatorEventKind::kUnmap) bytes -= e.bytes;
  }
  // Pages only: the per-thread caches stay on, as without an observer.
  bool wants_block_events() const override { return false; }
  std::int64_t bytes = 0;
};

class ModelCheck {
 public:
  struct Request {
    std::size_t size;
    StreamId stream;
    bool faulted;  // a device call that gets memory or moves it failed during it
  };

  // `faults`: the device calls that fail at random (FaultInjectingBackend, seeded with
  // `seed`); none by default.
  ModelCheck(std::uint32_t seed, bool vmm, std::uint64_t capacity, FaultRates faults = {},
             bool background = false)
      : rng_(seed),
        sim_({.capacity = capacity, .vmm = vmm, .events = SimBackendOptions::Events::kManual}),
        checked_(sim_),
        faults_(checked_, seed, faults) {
    checked_.synchronize_mu = &model_mu_;
    checked_.on_synchronize = [this] { dirty_.clear(); };
    checked_.on_record_event = [this](StreamId q, EventHandle e) {
      StreamClock clock = follows_[q];
      clock[q] = ++clock_;
      events_[e] = std::move(clock);
    };
    checked_.on_stream_wait = [this](StreamId s, EventHandle e) {
      for (const auto& [q, t] : events_.at(e)) follows_[s][q] = std::max(follows_[s][q], t);
    };
    checked_.on_unmap = [this](DevicePtr va, std::size_t bytes) {
      std::lock_guard lock(model_mu_);
      if (std::this_thread::get_id() != test_thread_) ++off_thread_unmaps_;
      CheckUnmap(va, bytes);
    };
    // Every other sequence without borrowing: requests on a stream with no free block of
    // its own then grow (and, under faults, fail) as they would without other streams.
    alloc_ = MakeCachingAllocator(
        faults_, {.observer = &mapped_,
                   .borrow = seed % 2 == 0,
                   .background_unmap = background,
                   .thread_cache = true,
                   .thread_cache_single_thread = true,
                   .thread_cache_bytes = kCacheBytes});
  }

  void CheckUnmap(DevicePtr va, std::size_t bytes) {
      for (const auto& [p, b] : live_) {
        ASSERT_FALSE(Overlaps(va, bytes, p, b.size)) << "unmapped under a live block";
      }
      for (const Dirty& d : dirty_) {
        if (d.streams.empty()) continue;  // its work all ran
        ASSERT_FALSE(Overlaps(va, bytes, d.ptr, d.size)) << "unmapped under queued work";
      }
  }

  // Every live block still backed (an unmap off the test's thread could come late).
  void CheckLiveBacked() {
    for (const auto& [p, b] : live_) {
      ASSERT_TRUE(sim_.IsAccessible(p, std::max<std::size_t>(b.size, 1))) << "unmapped later";
    }
  }

  // The hooks use members that go before the allocator does: its teardown calls none.
  // The unmapper's thread is idle first (EmptyCache waits for it), so none is running.
  ~ModelCheck() {
    alloc_->EmptyCache();
    checked_.on_synchronize = nullptr;
    checked_.on_unmap = nullptr;
    checked_.on_record_event = nullptr;
    checked_.on_stream_wait = nullptr;
  }

  std::size_t RandomSize() {
    switch (rng_() % 4) {
      case 0: return rng_() % 4096;                        // tiny, 0 included
      case 1: return 512 + rng_() % (256 << 10);           // slabs and small large blocks
      case 2: return (1 << 20) + rng_() % (6 << 20);       // a few pages
      default: return (rng_() % 16 + 1) * (std::size_t{1} << 20);  // page multiples and halves
    }
  }

  void Step() {
    ++steps_;
    const unsigned op = rng_() % 100;
    if (op < 45 || live_.empty()) {
      Allocate();
    } else if (op < 85) {
      Free();
    } else if (op < 92) {
      auto it = Pick();
      StreamId s = rng_() % kStreams;
      alloc_->RecordStream(it->first, s);
      if (s != it->second.stream) it->second.used_on.insert(s);
    } else if (op < 99) {
      StreamId s = rng_() % kStreams;
      std::lock_guard lock(model_mu_);  // an unmap may follow at once, off this thread
      sim_.CompleteStream(s);
      // What it waited for ran too.
      for (Dirty& d : dirty_) {
        std::erase_if(d.streams, [&](StreamId q) { return Follows(s, q, d.freed_at); });
      }
    } else {
      alloc_->EmptyCache();
      // It waited for the device: no free waits for a stream any more, even where an
      // event query failed.
      ASSERT_EQ(alloc_->detailed_stats().active_bytes[DetailedStats::kAll].current,
                static_cast<std::int64_t>(allocated_));
    }
    CheckAccounting();
    CheckLiveBacked();
  }

  void Allocate() {
    const std::size_t size = RandomSize();
    const StreamId s = rng_() % kStreams;
    const std::uint64_t faults_before = MemoryFaults();
    absl::StatusOr<DevicePtr> p = alloc_->Allocate(size, s);
    if (!p.ok()) {
      ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
      const OomReport r = alloc_->last_oom();
      ASSERT_EQ(r.requested_bytes, size);
      ASSERT_EQ(r.allocated_bytes, allocated_);
      ++ooms_;
      failed_.push_back({size, s, MemoryFaults() != faults_before});
      return;
    }
    ASSERT_TRUE(sim_.IsAccessible(*p, size)) << "block not backed by memory";
    // No overlap with a live block (the neighbours in address order suffice).
    auto next = live_.lower_bound(*p);
    if (next != live_.end()) {
      ASSERT_FALSE(Overlaps(*p, size, next->first, next->second.size));
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      ASSERT_FALSE(Overlaps(*p, size, prev->first, prev->second.size));
    }
    const auto physical = sim_.Backing(*p, std::max<std::size_t>(size, 1));
    for (const Dirty& d : dirty_) {
      bool others = false;
      for (StreamId q : d.streams) others |= !Follows(s, q, d.freed_at);
      if (others) {
        ASSERT_FALSE(Overlaps(*p, size, d.ptr, d.size)) << "reused before other streams ran";
        ASSERT_FALSE(SharePhysical(physical, d.physical))
            << "physical memory reused before other streams ran";
      }
    }
    std::lock_guard lock(model_mu_);
    live_.emplace(*p, LiveBlock{size, s, {}});
    allocated_ += size;
    largest_ = std::max<std::uint64_t>(largest_, RoundUp(size, kBlockAlign));
  }

  // Whether work queued on `s` from now on runs after the work queued on `q` by `when`.
  bool Follows(StreamId s, StreamId q, std::uint64_t when) {
    if (s == q) return true;
    auto clock = follows_.find(s);
    if (clock == follows_.end()) return false;
    auto t = clock->second.find(q);
    return t != clock->second.end() && t->second >= when;
  }

  std::map<DevicePtr, LiveBlock>::iterator Pick() {
    auto it = live_.lower_bound(static_cast<DevicePtr>(rng_()) << 20 | rng_());
    return it == live_.end() ? live_.begin() : it;
  }

  void Free() {
    auto it = Pick();
    const DevicePtr ptr = it->first;
    // The block's work was queued before its free: an event the free records on a stream
    // follows that work. Recorded first: the free itself may wait for the device (which
    // clears it) or unmap what it no longer holds.
    const std::uint64_t freed_at = ++clock_;
    const std::size_t size = std::max<std::size_t>(it->second.size, 1);
    Dirty d{ptr, size, it->second.used_on, sim_.Backing(ptr, size), freed_at};
    d.streams.insert(it->second.stream);
    {
      std::lock_guard lock(model_mu_);
      // Keep the reference small: regions whose streams all ran are clean.
      std::erase_if(dirty_, [](const Dirty& x) { return x.streams.empty(); });
      dirty_.push_back(std::move(d));
      allocated_ -= it->second.size;
      live_.erase(it);
    }
    alloc_->Free(ptr);
  }

  void CheckAccounting() {
    const AllocatorStats s = alloc_->stats();
    ASSERT_EQ(s.allocated_bytes, allocated_);
    ASSERT_EQ(s.active_blocks, live_.size());
    ASSERT_EQ(s.reserved_bytes, sim_.counters().physical_bytes);
    ASSERT_LE(s.reserved_bytes, sim_.capacity());
    // The thread cache holds at most its byte bound, or one block of any size.
    ASSERT_LE(s.thread_cached_bytes, std::max<std::uint64_t>(kCacheBytes, largest_));
    cached_seen_ |= s.thread_cached_bytes > 0;
    // A page mapped at two addresses (lent by a stitch) is counted once by observers.
    ASSERT_GE(mapped_.bytes, 0);
    ASSERT_LE(static_cast<std::uint64_t>(mapped_.bytes), sim_.counters().physical_bytes);
  }

  void FinishAndCheckEmpty() {
    while (!live_.empty()) Free();
    {
      std::lock_guard lock(model_mu_);  // the device's progress and the model's at once
      sim_.Synchronize();
      dirty_.clear();
    }
    alloc_->EmptyCache();
    const AllocatorStats s = alloc_->stats();
    EXPECT_EQ(s.allocated_bytes, 0u);
    EXPECT_EQ(s.active_blocks, 0u);
    EXPECT_EQ(s.reserved_bytes, 0u);
    EXPECT_EQ(s.thread_cached_bytes, 0u);
    EXPECT_EQ(sim_.counters().physical_bytes, 0u);
    EXPECT_EQ(sim_.counters().mapped_bytes, 0u);
    EXPECT_EQ(sim_.counters().reserved_va_bytes, 0u);
    EXPECT_EQ(sim_.live_events(), 0u);
    EXPECT_EQ(mapped_.bytes, 0);
  }

  // Each request served alone, written and freed: what failed once must not fail again
  // once the device behaves.
  void ServeAlone(const std::vector<Request>& requests) {
    for (const Request& r : requests) {
      absl::StatusOr<DevicePtr> p = alloc_->Allocate(r.size, r.stream);
      ASSERT_TRUE(p.ok()) << r.size << " bytes: " << p.status();
      ASSERT_TRUE(sim_.IsAccessible(*p, r.size)) << "block not backed by memory";
      largest_ = std::max<std::uint64_t>(largest_, RoundUp(r.size, kBlockAlign));
      alloc_->Free(*p);
    }
    CheckAccounting();
  }

  // Faults injected into calls that get or move memory: a failed event query or stream
  // wait alone must never cost an OOM (the slow path synchronizes instead).
  std::uint64_t MemoryFaults() const {
    const FaultCounts f = faults_.injected();
    return f.total() - f.event_query - f.stream_wait;
  }

  int ooms() const { return ooms_; }
  std::uint64_t cross_stream_lends() const { return alloc_->stats().cross_stream_lends; }
  std::uint64_t cross_stream_borrows() const { return alloc_->stats().cross_stream_borrows; }
  std::uint64_t stitches() const { return alloc_->stats().stitch_count; }
  // Requests whose slow path went past its first round (or stitched).
  std::int64_t retries() const {
    return alloc_->detailed_stats().num_alloc_retries;
  }
  bool cached_seen() const { return cached_seen_; }
  FaultInjectingBackend& faults() { return faults_; }
  int steps() const { return steps_; }
  std::uint64_t off_thread_unmaps() {
    std::lock_guard lock(model_mu_);
    return off_thread_unmaps_;
  }
  // The requests that failed (OOM), in order.
  const std::vector<Request>& failed() const { return failed_; }

 private:
  std::mt19937 rng_;
  SimBackend sim_;
  CheckedBackend checked_;
  FaultInjectingBackend faults_;  // what the allocator calls
  ObservedMapping mapped_;  // outlives the allocator, which reports its teardown
  std::unique_ptr<DeviceAllocator> alloc_;
  std::map<DevicePtr, LiveBlock> live_;
  std::vector<Dirty> dirty_;
  std::uint64_t clock_ = 0;                    // ticks at every free and event
  std::map<StreamId, StreamClock> follows_;    // per stream, what its new work runs after
  std::map<EventHandle, StreamClock> events_;  // what an event's waiters run after
  std::uint64_t allocated_ = 0;
  std::uint64_t largest_ = 0;  // the largest block handed out
  bool cached_seen_ = false;   // the thread cache held blocks at some step
  int ooms_ = 0;
  int steps_ = 0;
  std::vector<Request> failed_;
  // Taken by changes to live_ and dirty_, and by unmaps, which may come from the
  // allocator's own thread (background_unmap).
  std::mutex model_mu_;
  const std::thread::id test_thread_ = std::this_thread::get_id();
  std::uint64_t off_thread_unmaps_ = 0;  // under model_mu_
};

}  // namespace gpumem::testing
