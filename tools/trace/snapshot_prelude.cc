#include "tools/trace/snapshot_prelude.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
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

}  // namespace

void SynthesizePrelude(Trace* trace) {
  const std::int64_t t0 = trace->events.empty() ? 0 : trace->events.front().time_us;
  std::vector<Event> segment_prelude;
  std::vector<Event> block_prelude;
  std::size_t freed_unseen = 0;
  std::size_t live_unseen = 0;

  absl::flat_hash_set<DeviceAddr> seen_blocks;
  absl::flat_hash_set<DeviceAddr> seen_segments;
  std::vector<DeviceAddr> segment_event_addrs;  // to find events inside an end-state segment
  struct Mapping {
    DeviceAddr start;
    std::uint64_t size;
    bool operator<(const Mapping& o) const { return start < o.start; }
  };
  std::vector<Mapping> mappings;  // segment_map events: what the trace itself mapped
  for (const Event& e : trace->events) {
    const DeviceAddr key{e.device, e.addr};
    switch (e.action) {
      case Action::kAlloc:
        seen_blocks.insert(key);
        break;
      case Action::kFreeRequested:
      case Action::kFreeCompleted:
        if (seen_blocks.insert(key).second) {
          ++freed_unseen;
          block_prelude.push_back(Synthesized(Action::kAlloc, e.device, e.addr, e.size, e.stream, t0, 0));
          if (e.action == Action::kFreeCompleted) {
            block_prelude.push_back(
                Synthesized(Action::kFreeRequested, e.device, e.addr, e.size, e.stream, t0, 0));
          }
        }
        break;
      case Action::kSegmentAlloc:
      case Action::kSegmentMap:
        seen_segments.insert(key);
        segment_event_addrs.push_back(key);
        if (e.action == Action::kSegmentMap) mappings.push_back({key, e.size});
        break;
      case Action::kSegmentFree:
      case Action::kSegmentUnmap:
        if (seen_segments.insert(key).second) {
          Action make = e.action == Action::kSegmentFree ? Action::kSegmentAlloc : Action::kSegmentMap;
          segment_prelude.push_back(Synthesized(make, e.device, e.addr, e.size, e.stream, t0, 0));
        }
        segment_event_addrs.push_back(key);
        break;
      default:
        break;
    }
  }

  std::sort(segment_event_addrs.begin(), segment_event_addrs.end());
  std::sort(mappings.begin(), mappings.end());
  for (const Segment& seg : trace->segments) {
    if (seg.is_expandable) {
      // An expandable segment is one virtual range mapped piece by piece: the pieces of it
      // that no segment_map in the trace covers were mapped before the recording.
      const std::uint64_t end = seg.addr + seg.total_size;
      std::uint64_t cursor = seg.addr;
      auto gap = [&](std::uint64_t until) {
        if (until > cursor) {
          segment_prelude.push_back(Synthesized(Action::kSegmentMap, seg.device, cursor, until - cursor,
                                                seg.stream, t0, 0));
        }
      };
      for (auto it = std::lower_bound(mappings.begin(), mappings.end(), Mapping{{seg.device, seg.addr}, 0});
           it != mappings.end() && it->start.first == seg.device && it->start.second < end; ++it) {
        gap(it->start.second);
        cursor = std::max(cursor, it->start.second + std::min(it->size, end - it->start.second));
      }
      gap(end);
    }
    auto first = std::lower_bound(segment_event_addrs.begin(), segment_event_addrs.end(),
                                  DeviceAddr{seg.device, seg.addr});
    // An event at the segment's start counts even for an (odd) empty segment.
    const bool touched = first != segment_event_addrs.end() && first->first == seg.device &&
                         first->second - seg.addr < std::max<std::uint64_t>(seg.total_size, 1);
    if (!touched && !seg.is_expandable) {
      segment_prelude.push_back(Synthesized(seg.is_expandable ? Action::kSegmentMap : Action::kSegmentAlloc,
                                            seg.device, seg.addr, seg.total_size, seg.stream, t0, 0));
    }
    for (const SegmentBlock& b : seg.blocks) {
      if (b.allocated && !seen_blocks.contains(DeviceAddr{seg.device, b.addr})) {
        ++live_unseen;
        block_prelude.push_back(
            Synthesized(Action::kAlloc, seg.device, b.addr, b.size, seg.stream, t0, b.stack_id));
      }
    }
  }

  if (!segment_prelude.empty()) {
    trace->warnings.push_back(absl::StrCat(
        segment_prelude.size(),
        " segments (or mapped pieces of expandable ones) existed before the recording started: "
        "synthesized their segment_alloc / segment_map at the start"));
  }
  if (freed_unseen) {
    trace->warnings.push_back(absl::StrCat(
        freed_unseen,
        " blocks freed in the trace were allocated before it started: synthesized their allocs at the start"));
  }
  if (live_unseen) {
    trace->warnings.push_back(absl::StrCat(
        live_unseen,
        " blocks live at the end were allocated before the recording started: synthesized their allocs at the start"));
  }
  if (segment_prelude.empty() && block_prelude.empty()) return;
  std::vector<Event> events;
  events.reserve(segment_prelude.size() + block_prelude.size() + trace->events.size());
  events.insert(events.end(), segment_prelude.begin(), segment_prelude.end());
  events.insert(events.end(), block_prelude.begin(), block_prelude.end());
  events.insert(events.end(), trace->events.begin(), trace->events.end());
  trace->events = std::move(events);
}

}  // namespace gpumem::trace
