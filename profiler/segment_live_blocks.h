// The blocks live in one segment of a ring trace (GPUMEM_TRACE_MAX), kept by the segment's
// writer thread from the records it compresses, never by the allocating threads: the next
// segment's checkpoint, which makes that segment readable without this one.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "profiler/raw_record.h"

namespace gpumem {

class SegmentLiveBlocks {
 public:
  // An alloc or free compressed in drain number `drain` (other records are ignored).
  void Apply(const RawRecord& r, std::uint64_t drain);
  // Forgets frees that matched nothing two drains ago (see unmatched_), once the start is
  // known.
  void EndDrain(std::uint64_t drain);
  // The blocks live when the segment began: the previous segment's Live(). Frees seen
  // before it came apply to its blocks now.
  void SetStart(const std::vector<RawRecord>& start);
  bool started() const { return started_; }
  // The blocks live now (alloc records, autograd links left out), oldest first.
  std::vector<RawRecord> Live() const;
  std::size_t size() const { return live_.size(); }

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
};

}  // namespace gpumem
