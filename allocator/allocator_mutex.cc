#include "allocator/allocator_mutex.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gpumem {
namespace {

// The futex is the atomic's own word.
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
              std::atomic<std::uint32_t>::is_always_lock_free);

// Sleeps while `*word` is `expected` (or until a wake). Straight to the kernel, as glibc's
// mutex does: std::atomic::wait spins and yields first, which with more threads than
// cores takes the CPU from the holder (allocator_bench, 8 threads on 2 cores: ~2x slower).
void SleepWhile(std::atomic<std::uint32_t>& word, std::uint32_t expected) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected,
          nullptr, nullptr, 0);
#else
  word.wait(expected, std::memory_order_relaxed);
#endif
}

void WakeOne(std::atomic<std::uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr,
          nullptr, 0);
#else
  word.notify_one();
#endif
}

}  // namespace

void AllocatorMutex::LockContended(std::uint32_t seen) {
  // Whoever takes the lock from here on marks it kSleepers, so the unlock after it wakes
  // the next sleeper: the mark is never lost while one sleeps.
  if (seen != kSleepers) seen = state_.exchange(kSleepers, std::memory_order_acquire);
  while (seen != kFree) {
    SleepWhile(state_, kSleepers);
    seen = state_.exchange(kSleepers, std::memory_order_acquire);
  }
}

void AllocatorMutex::Wake() { WakeOne(state_); }

}  // namespace gpumem
