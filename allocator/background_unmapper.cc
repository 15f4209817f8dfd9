#include "allocator/background_unmapper.h"

#include <chrono>
#include <utility>

namespace gpumem {
namespace {

// How often a job's event is asked while its work runs: a query costs ~1.5 us, and an
// unmap that waits this long more costs nothing but the address, held a little longer.
constexpr auto kPollInterval = std::chrono::microseconds(100);
// How often a paused thread looks again: a growth's maps take ~30 us a page.
constexpr auto kPauseInterval = std::chrono::microseconds(50);

}  // namespace

BackgroundUnmapper::BackgroundUnmapper(Backend& backend, std::function<void()> on_start)
    : backend_(backend), thread_([this, f = std::move(on_start)] { Run(f); }) {}

BackgroundUnmapper::~BackgroundUnmapper() {
  if (InForkedChild()) {
    thread_.detach();  // the parent's: nothing to join here
    return;
  }
  Drain();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void BackgroundUnmapper::Submit(std::shared_ptr<UnmapJob> job) {
  if (InForkedChild()) {
    Unmap(*job);
    job->finished.store(true, std::memory_order_release);
    return;
  }
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_all();
}

// The callers waited for the device first (the allocator's quiet points), so every job's
// work is done: the thread stops polling and unmaps at once.
void BackgroundUnmapper::Drain() {
  if (InForkedChild()) return;  // every job was run at its Submit
  std::unique_lock lock(mu_);
  ++draining_;
  wake_.notify_all();
  finished_.wait(lock, [this] { return jobs_.empty(); });
  --draining_;
}

void BackgroundUnmapper::Run(std::function<void()> on_start) {
  t_background_driver_calls = true;
  if (on_start) on_start();
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopped, nothing left
    std::shared_ptr<UnmapJob> job = jobs_.front();
    if (!AwaitWork(*job, lock)) return;
    lock.unlock();
    Unmap(*job);
    job->finished.store(true, std::memory_order_release);
    lock.lock();
    jobs_.pop_front();
    if (jobs_.empty()) finished_.notify_all();
  }
}

bool BackgroundUnmapper::AwaitWork(const UnmapJob& job, std::unique_lock<std::mutex>& lock) {
  while (draining_ == 0) {
    lock.unlock();
    const bool done = backend_.EventCompleted(job.done);
    lock.lock();
    if (done) return true;
    if (stop_) return false;
    wake_.wait_for(lock, kPollInterval);
  }
  return true;
}

void BackgroundUnmapper::WaitWhilePaused() {
  if (paused_.load(std::memory_order_relaxed) == 0 || InForkedChild()) return;
  std::unique_lock lock(mu_);
  while (paused_.load(std::memory_order_relaxed) > 0 && draining_ == 0) {
    wake_.wait_for(lock, kPauseInterval);
  }
}

void BackgroundUnmapper::Unmap(UnmapJob& job) {
  for (UnmapJob::Run& run : job.runs) {
    while (run.unmapped < run.pages) {
      WaitWhilePaused();
      const DevicePtr top = run.base + (run.pages - run.unmapped - 1) * job.page_bytes;
      if (!backend_.Unmap(top, job.page_bytes).ok()) break;
      ++run.unmapped;
    }
  }
}

}  // namespace gpumem
