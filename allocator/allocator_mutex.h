// The caching allocator's lock. The three-state futex lock that glibc's default mutex is
// (free, held, held with sleepers), kept inline: an uncontended lock is one
// compare-and-swap and an unlock one exchange, where std::mutex costs a call into glibc and
// its type checks each way (an alloc+free pair through the C ABI: 571 instructions with
// std::mutex, 463 with this; callgrind, sim backend). Under contention a waiter sleeps in
// the kernel (a futex) until woken, as with std::mutex.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpumem {

class AllocatorMutex {
 public:
  AllocatorMutex() = default;
  AllocatorMutex(const AllocatorMutex&) = delete;
  AllocatorMutex& operator=(const AllocatorMutex&) = delete;

  void lock() {
    std::uint32_t free = kFree;
    if (!state_.compare_exchange_strong(free, kHeld, std::memory_order_acquire)) {
      LockContended(free);
    }
  }
  bool try_lock() {
    std::uint32_t free = kFree;
    return state_.compare_exchange_strong(free, kHeld, std::memory_order_acquire);
  }
  void unlock() {
    if (state_.exchange(kFree, std::memory_order_release) == kSleepers) Wake();
  }
  // Whether someone holds it now: one load, for telling contention apart.
  bool held() const { return state_.load(std::memory_order_relaxed) != kFree; }

 private:
  static constexpr std::uint32_t kFree = 0;
  static constexpr std::uint32_t kHeld = 1;
  static constexpr std::uint32_t kSleepers = 2;  // held, and someone may sleep on it

  // `seen`: the state the fast path found. Marks the lock as having sleepers (the unlock
  // then wakes one) and sleeps until it is free.
  void LockContended(std::uint32_t seen);
  void Wake();

  std::atomic<std::uint32_t> state_{kFree};
};

}  // namespace gpumem
