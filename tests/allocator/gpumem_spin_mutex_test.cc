#include "allocator/spin_mutex.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

// More threads than cores, so holders get preempted and waiters reach the sleeping path;
// a plain counter only comes out exact if no two threads were ever inside at once (and
// the TSan variant reports any unordered access).
TEST(SpinMutexTest, ExcludesUnderContention) {
  SpinMutex mu;
  long counter = 0;
  constexpr int kThreads = 8;
  constexpr int kIters = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        std::lock_guard lock(mu);
        long v = counter;
        if (i % 1000 == 0) std::this_thread::yield();  // hold it long enough to be waited on
        counter = v + 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter, long{kThreads} * kIters);
}

}  // namespace
}  // namespace gpumem
