// gpu_alloc_bench's pattern on SimBackend: N threads, each doing warm alloc+free pairs of
// one size on one shared gpumem allocator, with the per-thread caches on and off. Prints
// wall ns per pair per thread. A timed tool: `thread_cache_bench [threads] [pairs]`
// (defaults 8 and 2,000,000); docs/allocator.md, Thread caches.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/sim_backend.h"

namespace gpumem {
namespace {

double NsPerPair(int threads, long pairs, std::size_t size, bool cache) {
  SimBackend sim;
  CachingAllocatorOptions options;
  options.thread_cache = cache;
  std::unique_ptr<DeviceAllocator> alloc = MakeCachingAllocator(sim, options);
  std::atomic<int> ready{0};
  std::vector<double> ns(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) alloc->Free(*alloc->Allocate(size, kDefaultStream));
      ++ready;
      while (ready.load() < threads) std::this_thread::yield();
      const auto start = std::chrono::steady_clock::now();
      for (long i = 0; i < pairs; ++i) alloc->Free(*alloc->Allocate(size, kDefaultStream));
      const std::chrono::duration<double, std::nano> took =
          std::chrono::steady_clock::now() - start;
      ns[static_cast<std::size_t>(t)] = took.count() / static_cast<double>(pairs);
    });
  }
  for (std::thread& t : pool) t.join();
  double sum = 0;
  for (double x : ns) sum += x;
  return sum / threads;
}

}  // namespace
}  // namespace gpumem

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 8;
  const long pairs = argc > 2 ? std::atol(argv[2]) : 2000000;
  if (threads < 1 || pairs < 1) {
    std::fprintf(stderr, "usage: thread_cache_bench [threads >= 1] [pairs >= 1]\n");
    return 2;
  }
  std::printf("%d threads, one size each, wall ns per alloc+free pair per thread\n", threads);
  std::printf("%12s %10s %10s %8s\n", "size", "cache on", "cache off", "on/off");
  const std::size_t kKiB = 1024;
  for (std::size_t size : {std::size_t{512}, 64 * kKiB, 1024 * kKiB, 16384 * kKiB,
                           262144 * kKiB}) {
    const double on = gpumem::NsPerPair(threads, pairs, size, true);
    const double off = gpumem::NsPerPair(threads, pairs, size, false);
    std::printf("%12zu %10.1f %10.1f %8.2f\n", size, on, off, on / off);
  }
  return 0;
}
