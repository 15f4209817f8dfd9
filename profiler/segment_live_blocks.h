// The blocks live in one segment of a ring trace (GPUMEM_TRACE_MAX), and the device memory
// held (segments from the driver, ranges of mapped pages), kept by the segment's writer
// thread from the records it compresses, never by the allocating threads: the next
// segment's checkpoint, which makes that segment readable without this one (its reserved
// memory included).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "profiler/raw_record.h"

namespace gpumem {

class SegmentLiveBlocks {
 public:
  // A record compressed in drain number `drain`: allocs and frees, segment allocs and
  // frees, maps and unmaps, capacity records (others are ignored).
  void Apply(const RawRecord& r, std::uint64_t drain);
  // Forgets frees that matched nothing two drains ago (see unmatched_), once the start is
  // known.
  void EndDrain(std::uint64_t drain);
  // The blocks live when the segment began: the previous segment's Live(). Frees seen
  // before it came apply to its blocks now.
  void SetStart(const std::vector<RawRecord>& start);
  bool started() const { return started_; }
  // What is live now, oldest first: alloc records (autograd links left out), segment
  // alloc records, map records (one per mapped range) and each device's last capacity
  // record.
  std::vector<RawRecord> Live() const;
  std::size_t blocks() const { return live_.size(); }

 private:
  using Key = std::pair<std::int32_t, std::uint64_t>;  // device, address
  struct Unmatched {
    std::int64_t time_ns;
    std::uint64_t drain;
  };
  absl::flat_hash_map<Key, RawRecord> live_;
  // Frees of blocks not live here: a start block's, before SetStart, or one whose
  // allocation was recorded before it but published after it was drained (drained
  // next time, so an entry two drains old matches nothing).
  absl::flat_hash_map<Key, Unmatched> unmatched_;
  bool started_ = false;
  absl::flat_hash_map<Key, RawRecord> segments_;  // segment allocs not freed
  // Mapped ranges by device and start: the map record that made each (size = its length).
  std::map<Key, RawRecord> mapped_;
  absl::flat_hash_map<std::int32_t, RawRecord> caps_;  // the cap in force, by device
  // Device-memory records before SetStart: its state is replayed over the start's.
  std::vector<RawRecord> before_start_;
  // Segment allocs and frees, maps and unmaps, capacity; false for other records.
  bool ApplyDeviceMemory(const RawRecord& r);
  void Map(const RawRecord& r);
  void Unmap(const RawRecord& r);
};

}  // namespace gpumem
