// BackgroundUnmapper: unmaps the old addresses of lent pages (LargePool::TakeIdlePages)
// on a thread of its own, once the work that may still use them is done. An unmap costs
// ~20 us of host time; on a host-bound training step the device waits for the thread that
// makes it, so the allocator's thread hands them here and goes on (the driver's launches
// do not wait for these calls: tests/gpu/vmm_call_costs.py, launch_interference).
// The thread touches only the backend and its jobs; what the unmaps mean to the pools
// (holes gone, ranges released) is applied by the pool under the allocator's lock, when
// it collects a finished job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include "allocator/backend.h"

namespace gpumem {

// One stitch's old addresses: runs of whole pages, each unmapped from its top page down
// (as the pool's holes shrink) until the device refuses one.
struct UnmapJob {
  struct Run {
    DevicePtr base = 0;
    std::size_t pages = 0;
    std::size_t unmapped = 0;  // from the top: set by the thread
  };
  EventHandle done = 0;  // the work that may still use the pages; 0: none
  std::size_t page_bytes = 0;
  std::vector<Run> runs;
  std::atomic<bool> finished{false};
};

class BackgroundUnmapper {
 public:
  // `on_start` runs first on the new thread (the allocator marks it as its own there).
  BackgroundUnmapper(Backend& backend, std::function<void()> on_start);
  // Finishes every job submitted, then joins the thread.
  ~BackgroundUnmapper();
  BackgroundUnmapper(const BackgroundUnmapper&) = delete;
  BackgroundUnmapper& operator=(const BackgroundUnmapper&) = delete;

  // Jobs run in the order submitted.
  void Submit(std::shared_ptr<UnmapJob> job);
  // Returns once every job submitted so far has finished.
  void Drain();

  // While a Pause lives, the thread makes no driver call between its unmaps: the
  // driver runs VMM calls one at a time, so unmaps beside a growth's maps would make the
  // allocating thread wait for them (tests/gpu/vmm_call_costs.py, parallel_costs).
  class Pause {
   public:
    explicit Pause(BackgroundUnmapper* u) : u_(u) {
      if (u_ != nullptr) u_->paused_.fetch_add(1, std::memory_order_relaxed);
    }
    ~Pause() {
      if (u_ != nullptr) u_->paused_.fetch_sub(1, std::memory_order_relaxed);
    }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    BackgroundUnmapper* u_;
  };

 private:
  void Run(std::function<void()> on_start);
  // Polls the job's event until it completes or the unmapper drains (whose caller waited
  // for the device, so every event has completed); false if stopped first.
  bool AwaitWork(const UnmapJob& job, std::unique_lock<std::mutex>& lock);
  void Unmap(UnmapJob& job);
  // Waits while paused, unless a drain asks for everything now.
  void WaitWhilePaused();

  // A forked child has no copy of the thread (and maybe a copy of a held mu_): there,
  // jobs run on the caller's thread.
  bool InForkedChild() const { return getpid() != owner_pid_; }

  Backend& backend_;
  const pid_t owner_pid_ = getpid();
  std::mutex mu_;
  std::condition_variable wake_;      // a job came, a drain began, or the stop
  std::condition_variable finished_;  // the queue emptied
  std::deque<std::shared_ptr<UnmapJob>> jobs_;  // the front one is running
  int draining_ = 0;
  std::atomic<int> paused_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpumem
