// SpinMutex: the caching allocator's lock. Its critical sections last tens of
// nanoseconds, so a thread that finds it held spins a little (the holder is about to
// leave) before it sleeps on a futex (std::atomic::wait). std::mutex sleeps at once, and
// a sleep and wake-up cost microseconds each: with 8 threads allocating, that convoy, not
// the work under the lock, set the time per pair.
// States (as in Drepper, "Futexes Are Tricky"): 0 free, 1 held, 2 held with sleepers.
#pragma once

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace gpumem {

class SpinMutex {
 public:
  void lock() {
    int c = 0;
    if (state_.compare_exchange_strong(c, 1, std::memory_order_acquire)) return;
    for (int i = 0; i < kSpins; ++i) {
      Pause();
      c = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(c, 1, std::memory_order_acquire)) {
        return;
      }
    }
    // Sleep; whoever takes it from here marks it 2 so that its unlock wakes the others.
    while (state_.exchange(2, std::memory_order_acquire) != 0) {
      state_.wait(2, std::memory_order_relaxed);
    }
  }

  void unlock() {
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }

 private:
  // About a microsecond of spinning: several critical sections' worth.
  static constexpr int kSpins = 128;

  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }

  std::atomic<int> state_{0};
};

}  // namespace gpumem
