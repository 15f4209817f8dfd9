#include "tools/trace/snapshot_prelude.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace gpumem::trace {
namespace {

using DeviceAddr = std::pair<std::int32_t, std::uint64_t>;

Event Synthesized(Action action, std::int32_t device, std::uint64_t addr, std::uint64_t size,
                  std::uint64_t stream, std::int64_t time_us, std::uint32_t stack_id) {
  Event e;
  e.action = action;
  e.device = device;
  e.addr = addr;
  e.size = size;
  e.stream = stream;
  e.time_us = time_us;
  e.stack_id = stack_id;
  return e;
}

// A segment_map in the trace: what the trace itself mapped.
struct Mapping {
  DeviceAddr start;
  std::uint64_t size;
  bool operator<(const Mapping& o) const { return start < o.start; }
};

// Collects the synthesized events in two lists (segments first, then blocks) from one pass
// over the events and one over the end state.
class PreludeBuilder {
 public:
  explicit PreludeBuilder(const Trace& trace)
      : t0_(trace.events.empty() ? 0 : trace.events.front().time_us) {}

  void ScanEvents(const std::vector<Event>& events) {
    for (const Event& e : events) ScanEvent(e);
    std::sort(segment_event_addrs_.begin(), segment_event_addrs_.end());
    std::sort(mappings_.begin(), mappings_.end());
  }

  void ScanEndState(const std::vector<Segment>& segments) {
    for (const Segment& seg : segments) {
      if (seg.is_expandable) {
        AddUnmappedPieces(seg);
      } else if (!Touched(seg)) {
        segments_.push_back(Synthesized(Action::kSegmentAlloc, seg.device, seg.addr,
                                        seg.total_size, seg.stream, t0_, 0));
      }
      AddLiveBlocksNoEventTouches(seg);
    }
  }

  void Warn(std::vector<std::string>* warnings) const {
    if (!segments_.empty()) {
      warnings->push_back(absl::StrCat(
          segments_.size(),
          " segments (or mapped pieces of expandable ones) existed before the recording "
          "started: synthesized their segment_alloc / segment_map at the start"));
    }
    if (freed_unseen_) {
      warnings->push_back(absl::StrCat(freed_unseen_,
                                       " blocks freed in the trace were allocated before it "
                                       "started: synthesized their allocs at the start"));
    }
    if (live_unseen_) {
      warnings->push_back(absl::StrCat(live_unseen_,
                                       " blocks live at the end were allocated before the "
                                       "recording started: synthesized their allocs at the start"));
    }
  }

  void Prepend(std::vector<Event>* events) const {
    if (segments_.empty() && blocks_.empty()) return;
    std::vector<Event> all;
    all.reserve(segments_.size() + blocks_.size() + events->size());
    all.insert(all.end(), segments_.begin(), segments_.end());
    all.insert(all.end(), blocks_.begin(), blocks_.end());
    all.insert(all.end(), events->begin(), events->end());
    *events = std::move(all);
  }

 private:
  void ScanEvent(const Event& e) {
    const DeviceAddr key{e.device, e.addr};
    switch (e.action) {
      case Action::kAlloc:
        seen_blocks_.insert(key);
        break;
      case Action::kFreeRequested:
      case Action::kFreeCompleted:
        if (seen_blocks_.insert(key).second) AddFreedUnseen(e);
        break;
      case Action::kSegmentAlloc:
      case Action::kSegmentMap:
        seen_segments_.insert(key);
        segment_event_addrs_.push_back(key);
        if (e.action == Action::kSegmentMap) mappings_.push_back({key, e.size});
        break;
      case Action::kSegmentFree:
      case Action::kSegmentUnmap:
        if (seen_segments_.insert(key).second) {
          const Action make =
              e.action == Action::kSegmentFree ? Action::kSegmentAlloc : Action::kSegmentMap;
          segments_.push_back(Synthesized(make, e.device, e.addr, e.size, e.stream, t0_, 0));
        }
        segment_event_addrs_.push_back(key);
        break;
      default:
        break;
    }
  }

  // A block whose first event frees it was allocated before the recording.
  void AddFreedUnseen(const Event& e) {
    ++freed_unseen_;
    blocks_.push_back(Synthesized(Action::kAlloc, e.device, e.addr, e.size, e.stream, t0_, 0));
    if (e.action == Action::kFreeCompleted) {
      blocks_.push_back(
          Synthesized(Action::kFreeRequested, e.device, e.addr, e.size, e.stream, t0_, 0));
    }
  }

  // An expandable segment is one virtual range mapped piece by piece: the pieces of it
  // that no segment_map in the trace covers were mapped before the recording.
  void AddUnmappedPieces(const Segment& seg) {
    const std::uint64_t end = seg.addr + seg.total_size;
    std::uint64_t cursor = seg.addr;
    auto gap = [&](std::uint64_t until) {
      if (until > cursor) {
        segments_.push_back(Synthesized(Action::kSegmentMap, seg.device, cursor, until - cursor,
                                        seg.stream, t0_, 0));
      }
    };
    for (auto it = std::lower_bound(mappings_.begin(), mappings_.end(),
                                    Mapping{{seg.device, seg.addr}, 0});
         it != mappings_.end() && it->start.first == seg.device && it->start.second < end; ++it) {
      gap(it->start.second);
      cursor = std::max(cursor, it->start.second + std::min(it->size, end - it->start.second));
    }
    gap(end);
  }

  // Whether any segment event lies inside the segment. An event at the segment's start
  // counts even for an (odd) empty segment.
  bool Touched(const Segment& seg) const {
    auto first = std::lower_bound(segment_event_addrs_.begin(), segment_event_addrs_.end(),
                                  DeviceAddr{seg.device, seg.addr});
    return first != segment_event_addrs_.end() && first->first == seg.device &&
           first->second - seg.addr < std::max<std::uint64_t>(seg.total_size, 1);
  }

  void AddLiveBlocksNoEventTouches(const Segment& seg) {
    for (const SegmentBlock& b : seg.blocks) {
      if (b.allocated && !seen_blocks_.contains(DeviceAddr{seg.device, b.addr})) {
        ++live_unseen_;
        blocks_.push_back(
            Synthesized(Action::kAlloc, seg.device, b.addr, b.size, seg.stream, t0_, b.stack_id));
      }
    }
  }

  const std::int64_t t0_;
  std::vector<Event> segments_;
  std::vector<Event> blocks_;
  std::size_t freed_unseen_ = 0;
  std::size_t live_unseen_ = 0;
  absl::flat_hash_set<DeviceAddr> seen_blocks_;
  absl::flat_hash_set<DeviceAddr> seen_segments_;
  std::vector<DeviceAddr> segment_event_addrs_;  // to find events inside an end-state segment
  std::vector<Mapping> mappings_;
};

}  // namespace

void SynthesizePrelude(Trace* trace) {
  const bool no_history = trace->events.empty();
  PreludeBuilder builder(*trace);
  builder.ScanEvents(trace->events);
  builder.ScanEndState(trace->segments);
  if (no_history && !trace->segments.empty()) {
    // torch.cuda.memory._snapshot() with history never recorded: users take it for one.
    trace->warnings.push_back(
        "the snapshot holds no allocation history, only what was live when it was taken: "
        "leak detection, steps and an OOM's cause need the allocations and frees. Call "
        "torch.cuda.memory._record_memory_history(max_entries=100000) at the script's "
        "start, then torch.cuda.memory._dump_snapshot(PATH) when it fails or ends");
  }
  builder.Warn(&trace->warnings);
  builder.Prepend(&trace->events);
}

}  // namespace gpumem::trace
