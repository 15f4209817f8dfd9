#include "allocator/stream_guard.h"

#include <algorithm>

namespace gpumem {

StreamGuard::~StreamGuard() {
  for (Pending& p : pending_) {
    for (const StreamEvent& e : p.events) backend_.ReleaseEvent(e.event);
  }
}

void StreamGuard::Defer(DevicePtr ptr, const std::vector<StreamId>& streams) {
  Pending p{ptr, {}};
  p.events.reserve(streams.size());
  for (StreamId s : streams) p.events.push_back({s, backend_.RecordEvent(s)});
  pending_.push_back(std::move(p));
}

bool StreamGuard::Done(Pending& p, bool synchronized) {
  std::size_t keep = 0;
  for (const StreamEvent& e : p.events) {
    if (synchronized || queries_.Completed(e.stream, e.event)) {
      backend_.ReleaseEvent(e.event);
    } else {
      p.events[keep++] = e;
    }
  }
  p.events.resize(keep);
  return keep == 0;
}

bool EventQueries::Completed(StreamId stream, EventHandle event) {
  if (std::find(busy_.begin(), busy_.end(), stream) != busy_.end()) return false;
  if (backend_.EventCompleted(event)) return true;
  busy_.push_back(stream);
  return false;
}

}  // namespace gpumem
