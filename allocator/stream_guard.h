// StreamGuard: blocks freed while work queued on other streams may still use them
// (RecordStream). Each waits for an event recorded, at free time, on every such stream;
// only then does the allocator take it back. Not thread-safe: used under the
// allocator's lock.
#pragma once

#include <cstddef>
#include <vector>

#include "allocator/backend.h"

namespace gpumem {

// Asks whether events are done, at most one not yet done per stream: a stream's events
// complete in the order they were recorded, so once one is not done its later ones are
// not asked (an event query costs ~1.6 us on an H100). Reset() starts a round of
// questions; an event asked before an earlier one of its stream may hold that one back
// a round, never let a later one through early.
class EventQueries {
 public:
  explicit EventQueries(Backend& backend) : backend_(backend) {}
  void Reset() { busy_.clear(); }
  bool Completed(StreamId stream, EventHandle event);

 private:
  Backend& backend_;
  std::vector<StreamId> busy_;  // streams with an event not done, this round
};

class StreamGuard {
 public:
  explicit StreamGuard(Backend& backend) : backend_(backend), queries_(backend) {}
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
    queries_.Reset();
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

  Backend& backend_;
  std::vector<Pending> pending_;  // in the order they were deferred
  EventQueries queries_;
};

}  // namespace gpumem
