#include "allocator/stream_guard.h"

namespace gpumem {

StreamGuard::~StreamGuard() {
  for (Pending& p : pending_) {
    for (EventHandle e : p.events) backend_.ReleaseEvent(e);
  }
}

void StreamGuard::Defer(DevicePtr ptr, const std::vector<StreamId>& streams) {
  Pending p{ptr, {}};
  p.events.reserve(streams.size());
  for (StreamId s : streams) p.events.push_back(backend_.RecordEvent(s));
  pending_.push_back(std::move(p));
}

bool StreamGuard::Done(Pending& p, bool synchronized) {
  std::size_t keep = 0;
  for (EventHandle e : p.events) {
    if (synchronized || backend_.EventCompleted(e)) {
      backend_.ReleaseEvent(e);
    } else {
      p.events[keep++] = e;
    }
  }
  p.events.resize(keep);
  return keep == 0;
}

}  // namespace gpumem
