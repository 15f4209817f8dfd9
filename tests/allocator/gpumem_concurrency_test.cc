// Many threads on several streams at once, small and large blocks, with frees crossing
// threads. Runs under the _tsan variant, which reports any data race in the allocator.
#include <atomic>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/fault_injecting_backend.h"
#include "allocator/sim_backend.h"

namespace gpumem {
namespace {

// 8 threads of 1500 random operations on 3 streams, frees crossing threads; returns how
// many requests failed: `ooms` those that were out of memory, the rest otherwise (a
// block not backed by memory, or an error other than an OOM).
int RunThreads(DeviceAllocator& alloc, const SimBackend& sim, std::atomic<int>& ooms) {
  constexpr int kThreads = 8;
  constexpr int kOps = 1500;
  // Blocks handed between threads: a free often happens on another thread.
  std::mutex shared_mu;
  std::vector<std::pair<DevicePtr, std::size_t>> shared;
  std::atomic<int> failures{0};

  auto worker = [&](int id) {
    std::mt19937 rng(id);
    std::vector<std::pair<DevicePtr, std::size_t>> mine;
    for (int i = 0; i < kOps; ++i) {
      const unsigned op = rng() % 10;
      if (op < 5 || mine.empty()) {
        const std::size_t size = rng() % 2 ? rng() % 65536 : (rng() % 8 + 1) << 20;
        const StreamId stream = static_cast<StreamId>(id % 3);
        absl::StatusOr<DevicePtr> p = alloc.Allocate(size, stream);
        if (!p.ok() && absl::IsResourceExhausted(p.status())) {
          ++ooms;
          continue;
        }
        if (!p.ok() || !sim.IsAccessible(*p, size)) {
          ++failures;
          continue;
        }
        if (op == 0) alloc.RecordStream(*p, (stream + 1) % 3);
        mine.emplace_back(*p, size);
      } else if (op < 8) {
        alloc.Free(mine.back().first);
        mine.pop_back();
      } else if (op == 8) {
        std::lock_guard lock(shared_mu);
        shared.push_back(mine.back());
        mine.pop_back();
      } else {
        std::lock_guard lock(shared_mu);
        if (!shared.empty()) {
          alloc.Free(shared.back().first);
          shared.pop_back();
        }
      }
      if (i % 500 == 0) (void)alloc.stats();
      if (i % 700 == 0) alloc.EmptyCache();
    }
    for (auto& [p, size] : mine) alloc.Free(p);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  for (auto& [p, size] : shared) alloc.Free(p);
  return failures.load();
}

void ExpectEmpty(DeviceAllocator& alloc, const SimBackend& sim) {
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.active_blocks, 0u);
  EXPECT_EQ(s.alloc_count, s.free_count);
  alloc.EmptyCache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  EXPECT_EQ(sim.live_events(), 0u);
}

TEST(GpumemConcurrencyTest, ThreadsAllocateAndFreeWithoutRacesOrOverlap) {
  // Room to spare: the threads' live blocks reach ~2 GiB, and with 2 GiB some TSan
  // interleavings filled the device (2021.8 MiB allocated, a 7 MiB request, 6 MiB the
  // largest free piece): an out-of-memory this test is not about.
  SimBackend sim({.capacity = std::uint64_t{4} << 30});
  auto alloc = MakeCachingAllocator(sim);
  std::atomic<int> ooms{0};
  EXPECT_EQ(RunThreads(*alloc, sim, ooms), 0);
  EXPECT_EQ(ooms.load(), 0);
  ExpectEmpty(*alloc, sim);
}

// With no budget for new pages every growth stitches, lending pages whose old addresses
// the allocator's own thread unmaps (background_unmap) while the others allocate.
TEST(GpumemConcurrencyTest, ThreadsWhileLentPagesAreUnmappedInTheBackground) {
  SimBackend sim({.capacity = std::uint64_t{4} << 30});
  auto alloc = MakeCachingAllocator(
      sim, {.background_unmap = true, .new_page_headroom = 0, .max_new_page_headroom = 0});
  std::atomic<int> ooms{0};
  EXPECT_EQ(RunThreads(*alloc, sim, ooms), 0);
  EXPECT_EQ(ooms.load(), 0);
  EXPECT_GT(alloc->stats().stitch_count, 0u);
  EXPECT_GT(sim.counters().unmaps, 0u);
  ExpectEmpty(*alloc, sim);
}

// The same with device calls failing at random (FaultInjectingBackend): requests may fail,
// as OOMs only; then, faults off, everything goes back.
TEST(GpumemConcurrencyTest, ThreadsUnderInjectedFaults) {
  SimBackend sim({.capacity = std::uint64_t{4} << 30});
  FaultInjectingBackend faults(sim, /*seed=*/3,
                               {.create = 0.1, .map = 0.1, .unmap = 0.2, .event_query = 0.3,
                                .reserve = 0.05});
  auto alloc = MakeCachingAllocator(faults);
  std::atomic<int> ooms{0};
  EXPECT_EQ(RunThreads(*alloc, sim, ooms), 0);
  EXPECT_GT(faults.injected().total(), 0u);
  EXPECT_EQ(alloc->stats().reserved_bytes, sim.counters().physical_bytes);
  faults.set_rates({});
  ExpectEmpty(*alloc, sim);
}

}  // namespace
}  // namespace gpumem
