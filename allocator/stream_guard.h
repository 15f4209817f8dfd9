// StreamGuard: blocks freed while work queued on other streams may still use them
// (RecordStream). Each waits for an event recorded, at free time, on every such stream;
// only then does the allocator take it back. Not thread-safe: used under the
// allocator's lock.
#pragma once

#include <cstddef>
#include <vector>

#include "allocator/backend.h"

namespace gpumem {

class StreamGuard {
 public:
  explicit StreamGuard(Backend& backend) : backend_(backend) {}
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

  bool empty() const { return pending_.empty(); }
  std::size_t size() const { return pending_.size(); }

  // Records an event on each of `streams` and holds `ptr` until all have completed.
  void Defer(DevicePtr ptr, const std::vector<StreamId>& streams);

  // Calls release(ptr) for each held block whose events have all completed; for every
  // one if `synchronized`: the caller waited for the device since the last Defer, so no
  // event need be asked (a failed query answers "not yet" until then). A stream's events
  // complete in the order they were recorded: once one is not done, its later ones are
  // not asked (a call asks at most one event per stream that is still busy).
  template <typename F>
  void Collect(F&& release, bool synchronized = false) {
    busy_.clear();
    std::size_t keep = 0;
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      if (Done(pending_[i], synchronized)) {
        release(pending_[i].ptr);
      } else {
        if (keep != i) pending_[keep] = std::move(pending_[i]);  // never onto itself
        ++keep;
      }
    }
    pending_.resize(keep);
  }

 private:
  struct StreamEvent {
    StreamId stream;
    EventHandle event;
  };
  struct Pending {
    DevicePtr ptr;
    std::vector<StreamEvent> events;
  };
  // Releases the completed events of `p` (all of them if `synchronized`); true when none
  // is left.
  bool Done(Pending& p, bool synchronized);
  // Whether the event is done, asked only if no earlier event of its stream was not.
  bool Completed(const StreamEvent& e);

  Backend& backend_;
  std::vector<Pending> pending_;  // in the order they were deferred
  std::vector<StreamId> busy_;    // streams with an event not done, in this Collect
};

}  // namespace gpumem
