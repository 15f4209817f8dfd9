// The trace a recorder writes: one plain file, or with GPUMEM_TRACE_MAX a ring bounded on
// disk. A ring is a run of segment files beside the trace's name (run.seg0.gpumem,
// run.seg1.gpumem, ...; the name itself a symbolic link to the newest), each a complete
// trace of its own: when the one being written passes its share of the bound, the next
// opens, recording moves to it, the old one is closed, and the blocks live at that moment
// (with their stacks, and every frame and stack definition) become the new segment's
// checkpoint, so any segment reads without those before it. The next segment is opened
// ahead and takes over on the full one's writer thread; the oldest is deleted before a
// segment opens, so the files on disk never number more than `segments`
// (docs/profiler.md, Bounded traces; docs/trace-format.md, Ring traces).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "profiler/trace_writer.h"

namespace gpumem {

struct TraceRingOptions {
  TraceWriterOptions writer;  // its path is the trace's name
  std::uint64_t max_bytes = 0;  // 0: one plain file, unbounded
  std::uint32_t segments = 8;
  // Below this a ring is refused: a segment must hold more than its journal regions and
  // checkpoint.
  static constexpr std::uint64_t kMinBytes = std::uint64_t{16} << 20;
};

class TraceRing {
 public:
  static absl::StatusOr<std::unique_ptr<TraceRing>> Open(TraceRingOptions options);
  ~TraceRing();
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;

  // The segment being written. `publish` hears of each next one, from the ring's own
  // thread; rotation starts with this call.
  TraceWriter* current() const { return current_.load(std::memory_order_acquire); }
  void Start(std::function<void(TraceWriter*)> publish);
  // Into the current segment, or the next one if it closed meanwhile (what the recorder
  // does with its own copy of current()).
  void Record(const RawRecord& r);
  // Closes the segment being written (and stops rotating).
  absl::Status Close();

  // The name readers open: the plain file, or the ring's link to its newest segment.
  const std::string& path() const { return path_; }
  bool bounded() const { return options_.max_bytes > 0; }
  std::uint64_t max_bytes() const { return options_.max_bytes; }
  std::uint64_t segment() const { return segment_.load(std::memory_order_acquire); }
  // Records accepted so far, over every segment (TraceWriter::recorded()).
  std::uint64_t recorded() const {
    return recorded_before_.load(std::memory_order_acquire) + current()->recorded();
  }
  StackTable& stacks() { return *stacks_; }

 private:
  explicit TraceRing(TraceRingOptions options);
  std::string SegmentPath(std::uint64_t k) const;
  absl::StatusOr<std::unique_ptr<TraceWriter>> OpenSegment(std::uint64_t k);
  absl::Status OpenFirst();
  void PointLinkAt(std::uint64_t k);
  void Run();
  void Rotate();
  void OnFull();
  void Publish(TraceWriter* w);
  void CountAtSwap(TraceWriter* old);
  void PrepareSpare();
  void StopRotating();

  const TraceRingOptions options_;
  const long owner_pid_;  // a forked child must not join or close the parent's threads
  std::shared_ptr<StackTable> stacks_;
  std::string path_;
  std::string ring_id_;
  std::int64_t origin_ns_ = 0;
  std::int64_t start_unix_ns_ = 0;
  std::atomic<TraceWriter*> current_{nullptr};
  std::atomic<std::uint64_t> segment_{0};
  std::atomic<std::uint64_t> recorded_before_{0};  // by the segments before current()
  std::uint64_t counted_at_swap_ = 0;  // of the last segment swapped out, when it was

  // The ring's thread: rotation.
  std::unique_ptr<TraceWriter> writer_;   // current_'s owner
  // The segment closed last: kept a rotation longer, as a thread that read current_
  // just before it moved may still be recording into it.
  std::unique_ptr<TraceWriter> retired_;
  std::deque<std::uint64_t> kept_;  // segments on disk, oldest first
  std::function<void(TraceWriter*)> publish_;

  std::mutex mu_;  // what follows
  std::condition_variable cv_;
  std::unique_ptr<TraceWriter> spare_;  // the next segment, opened ahead
  bool swapped_ = false;                // the spare took over (OnFull)
  bool full_ = false;
  bool stop_ = false;
  std::unique_ptr<std::thread> thread_;
  bool crowded_said_ = false;  // ring thread
};

}  // namespace gpumem
