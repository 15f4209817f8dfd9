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

void BackgroundUnmapper::Submit(std::shared_ptr<MapJob> job) {
  if (InForkedChild()) {
    Map(*job);
    job->finished.store(true, std::memory_order_release);
    return;
  }
  {
    std::lock_guard lock(mu_);
    maps_.push_back(std::move(job));
  }
  wake_.notify_all();
}

void BackgroundUnmapper::FinishMaps() {
  if (InForkedChild()) return;
  std::unique_lock lock(mu_);
  finished_.wait(lock, [this] { return maps_.empty() && !mapping_; });
}

// The callers waited for the device first (the allocator's quiet points), so every job's
// work is done: the thread stops polling and unmaps at once.
void BackgroundUnmapper::Drain() {
  if (InForkedChild()) return;  // every job was run at its Submit
  std::unique_lock lock(mu_);
  ++draining_;
  wake_.notify_all();
  finished_.wait(lock, [this] { return Idle(); });
  --draining_;
}

void BackgroundUnmapper::Run(std::function<void()> on_start) {
  t_background_driver_calls = true;
  if (on_start) on_start();
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !jobs_.empty() || !maps_.empty(); });
    if (!maps_.empty()) {
      RunMapJob(lock);
      continue;
    }
    if (jobs_.empty()) return;  // stopped, nothing left
    std::shared_ptr<UnmapJob> job = jobs_.front();
    if (!WorkDone(*job, lock)) {
      if (stop_) return;
      continue;  // asked again after any map job that came meanwhile
    }
    lock.unlock();
    Unmap(*job);
    job->finished.store(true, std::memory_order_release);
    lock.lock();
    jobs_.pop_front();
    if (Idle()) finished_.notify_all();
  }
}

void BackgroundUnmapper::RunMapJob(std::unique_lock<std::mutex>& lock) {
  std::shared_ptr<MapJob> job = std::move(maps_.front());
  maps_.pop_front();
  mapping_ = true;
  lock.unlock();
  Map(*job);
  job->finished.store(true, std::memory_order_release);
  lock.lock();
  mapping_ = false;
  finished_.notify_all();  // FinishMaps, or a drain once all is done
}

// Whether the job's work has run; if not, waits a poll interval (a new job wakes it).
bool BackgroundUnmapper::WorkDone(const UnmapJob& job, std::unique_lock<std::mutex>& lock) {
  if (draining_ > 0) return true;
  lock.unlock();
  const bool done = backend_.EventCompleted(job.done);
  lock.lock();
  if (done || draining_ > 0) return true;
  if (!stop_) wake_.wait_for(lock, kPollInterval);
  return false;
}

void BackgroundUnmapper::WaitWhilePaused() {
  if (paused_.load(std::memory_order_relaxed) == 0 || InForkedChild()) return;
  std::unique_lock lock(mu_);
  while (paused_.load(std::memory_order_relaxed) > 0 && draining_ == 0) {
    wake_.wait_for(lock, kPauseInterval);
  }
}

// Page by page, so that a growth's maps on the allocating thread go first (a pause).
void BackgroundUnmapper::Map(MapJob& job) {
  for (; job.mapped < job.pages.size(); ++job.mapped) {
    WaitWhilePaused();
    const DevicePtr va = job.va + job.mapped * job.page_bytes;
    job.status = backend_.MapPages(va, job.page_bytes, &job.pages[job.mapped], 1);
    if (!job.status.ok()) return;
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
