// The caching allocator's per-thread caches: hits, misses, frees on other threads,
// thread exit, allocator destruction under live threads, exact stats under 8 threads,
// draining before growth, and blocks that must bypass the cache. The _tsan variant
// reports any data race between the cached and the locked paths.
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/sim_backend.h"
#include "allocator/size_classes.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

// Caches from the first call: most tests here drive one thread.
CachingAllocatorOptions Cached() {
  CachingAllocatorOptions o;
  o.thread_cache_single_thread = true;
  return o;
}

DevicePtr MustAllocate(DeviceAllocator& a, std::size_t bytes, StreamId s = kDefaultStream) {
  absl::StatusOr<DevicePtr> p = a.Allocate(bytes, s);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : 0;
}

TEST(ThreadCacheTest, AFreedBlockIsReusedByItsThread) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, Cached());
  const DevicePtr p = MustAllocate(*a, 4000);
  a->Free(p);
  EXPECT_EQ(a->stats().thread_cached_bytes, SizeClasses::ClassSize(SizeClasses::ClassOf(4000)));
  EXPECT_EQ(MustAllocate(*a, 3900), p);  // same class: a hit
  EXPECT_EQ(a->stats().thread_cached_bytes, 0u);
  a->Free(p);
  const DevicePtr big = MustAllocate(*a, 3 * kMiB + 7);
  a->Free(big);
  EXPECT_EQ(MustAllocate(*a, 3 * kMiB + 7), big);
  // A size with an empty bin misses and takes the pool.
  const DevicePtr other = MustAllocate(*a, 5 * kMiB);
  EXPECT_NE(other, big);
  a->Free(other);
  a->Free(big);
  const AllocatorStats s = a->stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.active_blocks, 0u);
  EXPECT_EQ(s.alloc_count, 5u);
  EXPECT_EQ(s.free_count, 5u);
  EXPECT_EQ(s.peak_allocated_bytes, 5 * kMiB + 3 * kMiB + 7);
}

// By default the lock is taken while threads do not contend for it: a second thread
// alone does not start the caches (forward and autograd threads taking turns), threads
// that keep meeting at the lock do, for every thread.
TEST(ThreadCacheTest, StartsWhenThreadsContend) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim);
  const DevicePtr kept = MustAllocate(*a, 4000);
  a->Free(MustAllocate(*a, 4000));
  for (int turn = 0; turn < 3; ++turn) {
    std::thread([&] {
      for (int i = 0; i < 2000; ++i) a->Free(MustAllocate(*a, 3 * kMiB));
    }).join();
  }
  a->Free(MustAllocate(*a, 8000));
  EXPECT_EQ(a->stats().thread_cached_bytes, 0u) << "threads taking turns never contend";
  a->Free(kept);
  EXPECT_EQ(a->stats().allocated_bytes, 0u);
}

// Holds the allocator's lock (observers are called under it) on its first page map until
// released: a thread allocating meanwhile finds the lock held, deterministically.
class HoldLockOnMap final : public AllocatorObserver {
 public:
  bool wants_block_events() const override { return false; }  // caches stay possible
  void OnEvent(const AllocatorEvent& e) override {
    if (e.kind != AllocatorEventKind::kMap || held_.exchange(true)) return;
    std::unique_lock lock(mu_);
    holding_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return released_; });
  }
  void WaitHolding() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return holding_; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::atomic<bool> held_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false, released_ = false;
};

TEST(ThreadCacheTest, StartsOnceTheLockIsContended) {
  SimBackend sim;
  HoldLockOnMap observer;
  CachingAllocatorOptions options;
  options.observer = &observer;
  options.thread_cache_lock_window = 1;  // judge every locked call
  options.thread_cache_contended_calls = 1;
  auto a = MakeCachingAllocator(sim, options);
  std::thread grower([&] { a->Free(MustAllocate(*a, 3 * kMiB)); });  // maps: holds the lock
  observer.WaitHolding();
  std::thread waiter([&] { a->Free(MustAllocate(*a, 8000)); });  // finds it held
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  observer.Release();
  grower.join();
  waiter.join();
  a->Free(MustAllocate(*a, 8000));  // cached from now on: allocated through this cache
  EXPECT_EQ(a->stats().thread_cached_bytes, SizeClasses::ClassSize(SizeClasses::ClassOf(8000)));
  EXPECT_EQ(a->stats().allocated_bytes, 0u);
  EXPECT_EQ(a->stats().active_blocks, 0u);
}

// A large miss gives the thread's cached large blocks back before best fit (the layout
// without caches); its small ones stay.
TEST(ThreadCacheTest, ALargeMissReturnsTheThreadsCachedLargeBlocks) {
  SimBackend sim;
  CachingAllocatorOptions o = Cached();
  o.thread_cache_bytes = 5 * kMiB;
  auto a = MakeCachingAllocator(sim, o);
  const DevicePtr big = MustAllocate(*a, 8 * kMiB);
  const DevicePtr spacer = MustAllocate(*a, 2 * kMiB);  // big and first never coalesce
  const DevicePtr first = MustAllocate(*a, 4 * kMiB);
  a->Free(MustAllocate(*a, 4000));
  a->Free(first);
  a->Free(big);  // over the byte bound: to the pool
  const std::size_t small = SizeClasses::ClassSize(SizeClasses::ClassOf(4000));
  EXPECT_EQ(a->stats().thread_cached_bytes, small + 4 * kMiB);
  const std::uint64_t reserved = a->stats().reserved_bytes;
  // No 3 MiB bin: the 4 MiB block goes back to the pool, and best fit carves the 3 MiB
  // from it rather than from the 8 MiB block.
  const DevicePtr p = MustAllocate(*a, 3 * kMiB);
  EXPECT_EQ(a->stats().thread_cached_bytes, small);
  EXPECT_EQ(a->stats().reserved_bytes, reserved);
  EXPECT_GE(p, first);
  EXPECT_LE(p + 3 * kMiB, first + 4 * kMiB);
  a->Free(p);
  a->Free(spacer);
}

TEST(ThreadCacheTest, OffOrObservedNothingIsCached) {
  struct Quiet : AllocatorObserver {
    void OnEvent(const AllocatorEvent&) override {}
  } observer;
  for (int observed = 0; observed < 2; ++observed) {
    SimBackend sim;
    CachingAllocatorOptions o = Cached();
    o.thread_cache = observed == 1;
    if (observed == 1) o.observer = &observer;
    auto a = MakeCachingAllocator(sim, o);
    a->Free(MustAllocate(*a, 4000));
    a->Free(MustAllocate(*a, 3 * kMiB));
    EXPECT_EQ(a->stats().thread_cached_bytes, 0u);
    EXPECT_EQ(a->stats().free_count, 2u);
  }
}

TEST(ThreadCacheTest, BoundsEntriesPerBinAndBytes) {
  SimBackend sim;
  CachingAllocatorOptions o = Cached();
  o.thread_cache_bin_entries = 2;
  o.thread_cache_bytes = 8 * kMiB;
  auto a = MakeCachingAllocator(sim, o);
  std::vector<DevicePtr> small;
  for (int i = 0; i < 5; ++i) small.push_back(MustAllocate(*a, 4 * kKiB));
  for (DevicePtr p : small) a->Free(p);
  EXPECT_EQ(a->stats().thread_cached_bytes, 2 * 4 * kKiB);
  a->EmptyCache();
  std::vector<DevicePtr> large;
  for (int i = 0; i < 5; ++i) large.push_back(MustAllocate(*a, 3 * kMiB + i * kKiB));
  for (DevicePtr p : large) a->Free(p);
  EXPECT_LE(a->stats().thread_cached_bytes, o.thread_cache_bytes);
  EXPECT_GT(a->stats().thread_cached_bytes, 0u);
  a->EmptyCache();
  // One block over the bound is still kept: a loop over one huge block hits.
  const DevicePtr huge = MustAllocate(*a, 64 * kMiB);
  a->Free(huge);
  EXPECT_EQ(a->stats().thread_cached_bytes, 64 * kMiB);
  EXPECT_EQ(MustAllocate(*a, 64 * kMiB), huge);
  a->Free(huge);
}

TEST(ThreadCacheTest, FreeOnAnotherThreadFindsTheRecord) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, Cached());
  DevicePtr small = 0, large = 0;
  std::thread t([&] {
    small = MustAllocate(*a, 4000);
    large = MustAllocate(*a, 3 * kMiB);
  });
  t.join();
  // The allocating thread is gone; so is its cache, but the records stayed.
  a->Free(small);
  std::thread u([&] {
    const DevicePtr p = MustAllocate(*a, 5 * kMiB);
    std::thread v([&] { a->Free(p); });  // freed while its owner thread lives
    v.join();
    a->Free(p);  // freed already: ignored
  });
  u.join();
  a->Free(large);
  a->Free(large);
  const AllocatorStats s = a->stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.active_blocks, 0u);
  EXPECT_EQ(s.free_count, 3u);
  EXPECT_EQ(s.thread_cached_bytes, 0u);
}

TEST(ThreadCacheTest, ThreadExitReturnsItsCache) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, Cached());
  std::thread t([&] {
    for (std::size_t size : {std::size_t{512}, 64 * kKiB, 3 * kMiB}) {
      a->Free(MustAllocate(*a, size));
    }
    EXPECT_GT(a->stats().thread_cached_bytes, 0u);
  });
  t.join();
  EXPECT_EQ(a->stats().thread_cached_bytes, 0u);
  a->EmptyCache();
  EXPECT_EQ(a->stats().reserved_bytes, 0u);
}

// The allocator dies while a thread that cached blocks in it lives on and then uses
// other allocators: its thread-locals must not touch the dead one (ASan checks).
TEST(ThreadCacheTest, AllocatorDestroyedWhileItsThreadLives) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, Cached());
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;
  auto wait_for = [&](int p) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return phase >= p; });
  };
  auto advance = [&](int p) {
    std::lock_guard lock(mu);
    phase = p;
    cv.notify_all();
  };
  DeviceAllocator* raw = a.get();
  std::thread t([&] {
    raw->Free(MustAllocate(*raw, 4000));
    raw->Free(MustAllocate(*raw, 3 * kMiB));
    advance(1);
    wait_for(2);
    // Allocators made after the dead one; one could reuse its heap address.
    for (int i = 0; i < 3; ++i) {
      SimBackend sim2;
      auto b = MakeCachingAllocator(sim2, Cached());
      b->Free(MustAllocate(*b, 4000));
      EXPECT_EQ(b->stats().thread_cached_bytes,
                SizeClasses::ClassSize(SizeClasses::ClassOf(4000)));
    }
  });
  wait_for(1);
  a.reset();
  advance(2);
  t.join();
}

TEST(ThreadCacheTest, SeveralAllocatorsOnOneThread) {
  SimBackend sim1, sim2;
  auto a = MakeCachingAllocator(sim1, Cached());
  auto b = MakeCachingAllocator(sim2, Cached());
  const DevicePtr pa = MustAllocate(*a, 4000);
  const DevicePtr pb = MustAllocate(*b, 4000);
  a->Free(pa);
  b->Free(pb);
  EXPECT_EQ(MustAllocate(*a, 4000), pa);
  EXPECT_EQ(MustAllocate(*b, 4000), pb);
  EXPECT_EQ(a->stats().allocated_bytes, 4000u);
  EXPECT_EQ(b->stats().allocated_bytes, 4000u);
}

// 8 threads hold their blocks together at a barrier, then free them, round after round:
// the peak is exactly everything held at once, and the counts add up.
TEST(ThreadCacheTest, ExactStatsAndPeakUnderEightThreads) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 50;
  const std::vector<std::size_t> sizes = {512, 4000, 100 * kKiB, 700 * kKiB, 3 * kMiB + 5};
  std::size_t per_thread = 0;
  for (std::size_t s : sizes) per_thread += s;
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, Cached());
  std::atomic<int> mismatches{0};
  // While every thread waits, everything is live: stats must say so exactly.
  std::barrier held(kThreads, [&]() noexcept {
    const AllocatorStats s = a->stats();
    if (s.allocated_bytes != per_thread * kThreads ||
        s.active_blocks != sizes.size() * kThreads) {
      ++mismatches;
    }
  });
  std::barrier freed(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        std::vector<DevicePtr> mine;
        for (std::size_t s : sizes) mine.push_back(MustAllocate(*a, s));
        held.arrive_and_wait();
        for (DevicePtr p : mine) a->Free(p);
        freed.arrive_and_wait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  const AllocatorStats s = a->stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.active_blocks, 0u);
  EXPECT_EQ(s.peak_allocated_bytes, per_thread * kThreads);
  EXPECT_EQ(s.alloc_count, std::uint64_t{kThreads} * kRounds * sizes.size());
  EXPECT_EQ(s.free_count, s.alloc_count);
  EXPECT_EQ(s.thread_cached_bytes, 0u);  // the threads exited
}

// Bytes freed into one thread's cache are not yet off the shared total (that thread's
// credit); another thread's allocation must not count them into the peak.
TEST(ThreadCacheTest, PeakIsExactWhileAnotherThreadHoldsFreedBytes) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, Cached());
  std::barrier step(2);
  std::thread t([&] {
    a->Free(MustAllocate(*a, 8 * kMiB));
    step.arrive_and_wait();  // freed: the true total is 0
    step.arrive_and_wait();
  });
  step.arrive_and_wait();
  const DevicePtr p = MustAllocate(*a, 6 * kMiB);
  AllocatorStats s = a->stats();
  EXPECT_EQ(s.allocated_bytes, 6 * kMiB);
  EXPECT_EQ(s.peak_allocated_bytes, 8 * kMiB);
  a->Free(p);
  const DevicePtr q = MustAllocate(*a, 7 * kMiB);  // reuses none of the 6 MiB: 7 is the total
  s = a->stats();
  EXPECT_EQ(s.allocated_bytes, 7 * kMiB);
  EXPECT_EQ(s.peak_allocated_bytes, 8 * kMiB);
  const DevicePtr r = MustAllocate(*a, 2 * kMiB);  // 9 MiB: a new peak
  EXPECT_EQ(a->stats().peak_allocated_bytes, 9 * kMiB);
  a->ResetPeaks();
  EXPECT_EQ(a->stats().peak_allocated_bytes, 9 * kMiB);
  a->Free(q);
  a->Free(r);
  a->ResetPeaks();
  EXPECT_EQ(a->stats().peak_allocated_bytes, 0u);
  step.arrive_and_wait();
  t.join();
}

// A block cached by a live thread must serve another thread's request when the device
// has no room for a second one.
TEST(ThreadCacheTest, CachedBlocksAreDrainedBeforeGrowth) {
  SimBackendOptions so;
  so.capacity = 64 * kMiB;
  SimBackend sim(so);
  auto a = MakeCachingAllocator(sim, Cached());
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;
  DevicePtr cached = 0;
  std::thread t([&] {
    cached = MustAllocate(*a, 48 * kMiB);
    a->Free(cached);
    std::unique_lock lock(mu);
    phase = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return phase == 2; });
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return phase == 1; });
  }
  EXPECT_EQ(a->stats().thread_cached_bytes, 48 * kMiB);
  EXPECT_EQ(MustAllocate(*a, 48 * kMiB), cached);
  AllocatorStats s = a->stats();
  EXPECT_EQ(s.oom_count, 0u);
  EXPECT_EQ(s.trim_count, 0u);  // drained before growing, not only once the device refused
  EXPECT_EQ(s.thread_cached_bytes, 0u);
  EXPECT_LE(s.reserved_bytes, so.capacity);
  {
    std::lock_guard lock(mu);
    phase = 2;
    cv.notify_all();
  }
  t.join();
}

TEST(ThreadCacheTest, RecordStreamBlocksBypassTheCache) {
  SimBackendOptions so;
  so.events = SimBackendOptions::Events::kManual;
  SimBackend sim(so);
  auto a = MakeCachingAllocator(sim, Cached());
  const DevicePtr p = MustAllocate(*a, 4000, kS1);
  ASSERT_TRUE(a->RecordStream(p, kS2));
  a->Free(p);
  EXPECT_EQ(a->stats().thread_cached_bytes, 0u);
  EXPECT_EQ(a->stats().allocated_bytes, 0u);
  // Work on kS2 may still use it: kS1 must not get it back yet.
  const DevicePtr q = MustAllocate(*a, 4000, kS1);
  EXPECT_NE(q, p);
  // A block recorded on its own stream only is cached as usual.
  ASSERT_TRUE(a->RecordStream(q, kS1));
  a->Free(q);
  EXPECT_GT(a->stats().thread_cached_bytes, 0u);
}

TEST(ThreadCacheTest, EmptyCacheReturnsEveryThreadsBlocks) {
  SimBackend sim;
  auto a = MakeCachingAllocator(sim, Cached());
  constexpr int kThreads = 3;
  std::barrier allocated(kThreads);
  std::barrier cached(kThreads + 1);
  std::barrier emptied(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Thread 2's stream may borrow the others' free blocks (never cached) and its growth
      // drains every cache: all allocate before any frees.
      std::vector<DevicePtr> mine;
      for (std::size_t size : {std::size_t{512} << t, 200 * kKiB, (3 + std::size_t(t)) * kMiB}) {
        mine.push_back(MustAllocate(*a, size, t == 2 ? kS1 : kDefaultStream));
      }
      allocated.arrive_and_wait();
      for (DevicePtr p : mine) a->Free(p);
      cached.arrive_and_wait();
      emptied.arrive_and_wait();
    });
  }
  cached.arrive_and_wait();
  EXPECT_GT(a->stats().thread_cached_bytes, 0u);
  a->EmptyCache();
  const AllocatorStats s = a->stats();
  EXPECT_EQ(s.thread_cached_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  emptied.arrive_and_wait();
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace gpumem
