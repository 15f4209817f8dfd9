// Writes a gpumem trace (docs/trace-format.md). Record() is the hot path: it writes a
// fixed-size record into the calling thread's own journal region, a ring that lives in
// the mmap'd trace file itself (profiler/journal_region.h), with no lock and no system
// call: when Record() returns, the record is in the kernel's page cache and a SIGKILL
// cannot lose it. A background thread drains every ring at least every flush interval
// (and whenever a ring is half full), sorts the batch by time, encodes and
// zstd-compresses it into checksummed chunks that say how far each region was consumed,
// and only then lets the ring's slots be reused. Flush() waits for that; Close() also
// writes the end chunk.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "profiler/mapped_file.h"
#include "profiler/raw_record.h"
#include "profiler/segment_live_blocks.h"
#include "profiler/stack_table.h"

namespace gpumem {

struct TraceWriterOptions {
  std::string path;
  // Extra header entries (stack mode, device names, the command line...). pid, the
  // clock origin and, unless given here, rank, local_rank, world_size and host are added
  // by the writer.
  std::map<std::string, std::string> header;
  int flush_interval_ms = 20;
  // A thread of its own fdatasync()s the file this often when chunks were written since
  // the last sync, so that a machine crash (not only a killed process) keeps what was
  // compressed before the last sync; 0 never syncs. Drains never wait for the disk.
  int sync_interval_ms = 1000;
  // Per thread, in the file (64 bytes each): a region per thread alive at once. Rounded
  // down to a power of two, at least 16.
  std::size_t ring_records = 2048;
  // The unit of loss of a file cut short (a full disk, an interrupted copy): the reader
  // keeps every complete chunk, so a cut loses at most the chunk it falls in.
  std::size_t records_per_chunk = 4096;
  int zstd_level = 1;

  // For the segments of a ring trace (profiler/trace_ring.h); the defaults write a plain
  // trace. The stack table that ids come from, shared by every segment: each writes
  // every definition (null: the writer's own table).
  std::shared_ptr<StackTable> stacks;
  std::uint32_t version = format::kVersion;
  // Keep the live blocks (LiveBlocks()) and take a checkpoint (SetCheckpoint()).
  bool track_live_blocks = false;
  // Once the file has grown past this many bytes (0: never), the writer thread calls
  // on_full, once.
  std::size_t full_bytes = 0;
  std::function<void()> on_full;
  // Once full, compress nothing more until Release(): the recording threads' records wait
  // in their journal regions (in the file), and at worst the threads wait for room, but
  // the file grows no further while the next segment is not ready.
  bool hold_when_full = false;
  // The most file space reserved ahead at once (profiler/mapped_file.h).
  std::size_t max_growth = std::size_t{256} << 20;
};

class TraceWriter {
 public:
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Open(TraceWriterOptions options);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Any thread. Blocks only when this thread's ring is full (the writer is behind).
  // Records made in a forked child are dropped: the parent owns the file. So are those
  // of a thread whose region cannot be created (status() says why). False only when the
  // writer is closed: a ring trace's recorder then records into the segment after it.
  bool Record(const RawRecord& record);
  void Annotate(std::int32_t device, const std::string& name, bool start);
  StackTable& stacks() { return *stacks_; }

  // Ring segments (track_live_blocks): the blocks live when this segment began, written
  // as the segment's checkpoint chunk by the next drain. Flush() after it: in the file.
  void SetCheckpoint(std::vector<RawRecord> blocks);
  // The blocks live after every record of this file: call after Close().
  std::vector<RawRecord> LiveBlocks() const;
  // Bytes in the file so far (journal regions included).
  std::size_t file_bytes();
  // A full segment's successor took over: drain on (hold_when_full).
  void Release();
  // The file has passed options.full_bytes (on_full was called).
  bool full() const { return full_said_.load(std::memory_order_acquire); }
  // The checkpoint chunk's bytes, once written.
  std::size_t checkpoint_bytes() const { return checkpoint_bytes_.load(std::memory_order_acquire); }

  // Returns once every record made before the call is in the file.
  void Flush();
  // Flushes, writes the end chunk, trims the file. Records made after it are dropped.
  absl::Status Close();

  // Records accepted so far: each is in the file (journal or chunk) once its Record()
  // returned, so a reader of a killed run's file finds at least this many.
  std::uint64_t recorded() const;
  const std::string& path() const { return file_.path(); }
  // The first write error, if any (the recording stops there).
  absl::Status status() const;
  // Chunks written so far, and how many of them the sync thread has put on the disk.
  std::uint64_t chunks_written() const { return chunks_written_.load(std::memory_order_acquire); }
  std::uint64_t chunks_synced() const { return chunks_synced_.load(std::memory_order_acquire); }

  static std::int64_t NowNs();
  static std::uint32_t ThreadId();

 private:
  struct Ring;
  TraceWriter(TraceWriterOptions options, MappedFile file);
  Ring* ThreadRing();
  // Writes one journal slot of the calling thread's ring (waits while it is full).
  void Append(Ring* ring, const RawRecord& record);
  std::shared_ptr<Ring> NewRing();
  // The writing thread, and the sync thread where options_ ask for one.
  void StartThreads();
  void Run();
  // The sync thread: fdatasync on `fd` (its own descriptor) while chunks keep coming.
  void SyncLoop(int fd);
  void StopSyncing();
  // After closed_ is set: returns once no thread is inside Record() past its check.
  void WaitForRecordsInFlight();
  bool HeldLocked() const;
  // A ring read up to `tail`; its slots below are free once the chunks are written.
  struct Drained {
    Ring* ring;
    std::uint64_t tail;
    bool exited;
  };
  // One pass of the writer thread: the rings' records, stacks and annotations to chunks.
  void DrainOnce();
  std::vector<Drained> DrainRings();  // into batch_
  Drained DrainRing(Ring* ring);
  void WriteBatch();
  void ReleaseDrained(const std::vector<Drained>& drained);
  // The last drain, the end chunk, and the file finished (writer thread, on Close()).
  void Finish();
  // The checkpoint chunk, and its blocks as the live set's start (writer thread).
  void WriteCheckpoint(const std::vector<RawRecord>& blocks);
  void NoteFileSize();
  void WriteChunk(format::ChunkKind kind, const std::string& payload);
  void SetError(const absl::Status& status);

  const TraceWriterOptions options_;
  // Read by every record: kept on one line.
  const std::uint64_t id_;
  const std::uint64_t fork_epoch_;
  std::atomic<bool> closed_{false};
  const std::shared_ptr<StackTable> stacks_;

  mutable std::mutex rings_mu_;
  std::vector<std::shared_ptr<Ring>> rings_;       // owned by a thread, or draining
  std::vector<std::shared_ptr<Ring>> free_rings_;  // drained; for the next new thread

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable wake_cv_;
  std::condition_variable flushed_cv_;
  bool wake_ = false;
  bool stop_ = false;
  std::uint64_t flush_requested_ = 0;
  std::uint64_t flush_done_ = 0;
  struct PendingAnnotation {
    std::int64_t time_ns;
    std::int32_t device;
    bool start;
    std::string name;
  };
  std::vector<PendingAnnotation> annotations_;
  std::optional<std::vector<RawRecord>> checkpoint_;  // not yet written
  bool released_ = false;
  absl::Status status_;

  // The file: the writer thread appends chunks, a thread's first record appends its
  // journal region.
  std::mutex file_mu_;
  MappedFile file_;
  std::uint32_t seq_ = 0;
  std::uint32_t next_region_ = 0;

  // Writer thread only.
  std::uint64_t written_events_ = 0;
  struct Pending {
    RawRecord record;
    std::uint32_t region;
    std::uint64_t index;
  };
  std::vector<Pending> batch_;
  StackTable::DefinitionCursor definitions_;  // what this file has defined
  std::unique_ptr<SegmentLiveBlocks> live_;    // track_live_blocks only
  std::uint64_t drains_ = 0;
  std::atomic<bool> full_said_{false};
  std::unique_ptr<std::thread> thread_;  // leaked, not joined, in a forked child

  std::atomic<std::size_t> checkpoint_bytes_{0};
  std::atomic<std::uint64_t> chunks_written_{0};
  std::atomic<std::uint64_t> chunks_synced_{0};
  std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  bool sync_stop_ = false;
  std::unique_ptr<std::thread> sync_thread_;  // as thread_
  int sync_fd_ = -1;  // the sync thread's descriptor of the file; it closes it
};

}  // namespace gpumem
