#include "profiler/trace_writer.h"

#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>

#include <utility>

#include "profiler/chunk_encoder.h"
#include "profiler/journal_region.h"
#include "profiler/prefetch_for_write.h"
#include "profiler/trace_path.h"

namespace gpumem {
namespace {

std::atomic<std::uint64_t> g_next_writer_id{1};
// Bumped in every forked child: a writer made before the fork belongs to the parent.
std::atomic<std::uint64_t> g_fork_epoch{0};

void OnForkChild() { g_fork_epoch.fetch_add(1, std::memory_order_relaxed); }

std::uint64_t ForkEpoch() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, &OnForkChild);
    return true;
  }();
  (void)registered;
  return g_fork_epoch.load(std::memory_order_relaxed);
}

// A power of two, so that a record's slot is a mask, not a division (the format allows
// any capacity; readers divide).
std::uint32_t RingCapacity(std::size_t n) {
  return static_cast<std::uint32_t>(
      std::bit_floor(std::clamp<std::size_t>(n, 16, format::kMaxJournalRecords)));
}

// A full memory barrier on every thread of the process at once (membarrier(2)), so that
// the hot path needs none: see TraceWriter::Record and WaitForRecordsInFlight. Where the
// kernel refuses, a pause long enough for any record under way to finish.
void BarrierOnEveryThread() {
  static const bool registered =
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  if (registered && ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) {
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

}  // namespace

// A single-producer (its owning thread) single-consumer (the writer thread) ring whose
// slots are a journal region of the file. Record i of the region goes to slot i %
// capacity; i counts on across owners, so the reader can tell old slots from new.
struct TraceWriter::Ring {
  explicit Ring(std::unique_ptr<JournalRegion> r)
      : region(std::move(r)), slots(region->slot(0)), capacity(region->capacity()) {}
  // capacity is a power of two (RingCapacity).
  format::JournalRecord* slot(std::uint64_t index) const {
    return slots + (index & (capacity - 1));
  }

  std::unique_ptr<JournalRegion> region;
  alignas(64) std::atomic<std::uint64_t> head{0};  // next to read (writer thread)
  alignas(64) std::atomic<std::uint64_t> tail{0};  // next to write (owning thread)
  // Set by the owning thread while it records (TraceWriter::Record): the last drain waits
  // for it to clear. On the owner's line, with tail.
  std::atomic<std::uint32_t> in_record{0};
  // The region's slots, on the owner's line: a record then costs no trip through the
  // region object (in training every line the recorder touches has gone cold since the
  // last record, and dependent misses queue).
  format::JournalRecord* const slots;
  const std::uint64_t capacity;
  // The owning thread's last read of head. Head only moves forward, so a stale copy only
  // overstates how full the ring is: head's line, which the writer keeps writing, is read
  // only when the ring may be half full, not on every record.
  std::uint64_t cached_head = 0;
  // Records that are not events (autograd link slots, caps, annotations, failed calls).
  std::atomic<std::uint64_t> not_events{0};
  std::atomic<bool> thread_exited{false};
};

namespace {

// Each thread's rings, one per writer it has recorded into. On thread exit the rings are
// marked, so the writer hands them to new threads once they are drained.
struct ThreadRings {
  struct Entry {
    std::uint64_t writer_id;
    std::shared_ptr<void> keep;  // the Ring, kept alive for the writer to drain
    void* ring;
    std::atomic<bool>* exited;
  };
  std::vector<Entry> entries;
  ~ThreadRings();
};
thread_local ThreadRings t_rings;
thread_local std::uint64_t t_last_writer = 0;
thread_local void* t_last_ring = nullptr;
// Set while the thread's rings are handed back: a ring may go to another thread then, so
// this thread must not write into it again (its records are dropped from here on).
thread_local bool t_exiting = false;

ThreadRings::~ThreadRings() {
  t_exiting = true;
  t_last_writer = 0;
  t_last_ring = nullptr;
  for (Entry& e : entries) e.exited->store(true, std::memory_order_release);
}

}  // namespace

std::int64_t TraceWriter::NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::uint32_t TraceWriter::ThreadId() {
  thread_local const std::uint32_t tid = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return tid;
}

namespace {

// Two live processes with one name (a pattern without %p, e.g. run-%l.gpumem on two hosts
// sharing a folder): neither may truncate the other's trace, so this one moves aside.
absl::StatusOr<MappedFile> CreateOrMoveAside(TraceWriterOptions& options) {
  const std::size_t initial = std::min<std::size_t>(1 << 20, options.max_growth);
  absl::StatusOr<MappedFile> file = MappedFile::Create(options.path, initial, options.max_growth);
  if (!absl::IsFailedPrecondition(file.status())) return file;
  const std::string taken = options.path;
  options.path = PathWithPid(taken, getpid());
  file = MappedFile::Create(options.path, initial, options.max_growth);
  if (file.ok()) {
    std::fprintf(stderr, "gpumem: %s is being written by another process; this one "
                 "(pid %ld) writes %s\n", taken.c_str(), static_cast<long>(getpid()),
                 options.path.c_str());
  }
  return file;
}

// The header chunk's payload: the caller's fields, then where and when the job runs.
std::string HeaderPayload(std::map<std::string, std::string> header, std::int64_t now_ns) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  header["pid"] = std::to_string(getpid());
  // Where the job is: the caller's values win (traces rewritten for another rank).
  header.try_emplace("rank", GlobalRankFromEnvironment());
  header.try_emplace("local_rank", LocalRankFromEnvironment());
  header.try_emplace("world_size", EnvOr("WORLD_SIZE", ""));
  header.try_emplace("host", host);
  // A ring's segments keep its first segment's: their times are on one axis.
  header.try_emplace("clock_origin_ns", std::to_string(now_ns));
  header.try_emplace("start_unix_ns",
                     std::to_string(std::int64_t{wall.tv_sec} * 1000000000 + wall.tv_nsec));
  std::string payload;
  format::PutVarint(&payload, header.size());
  for (const auto& [key, value] : header) {
    format::PutString(&payload, key);
    format::PutString(&payload, value);
  }
  return payload;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(TraceWriterOptions options) {
  absl::StatusOr<MappedFile> file = CreateOrMoveAside(options);
  if (!file.ok()) return file.status();
  std::unique_ptr<TraceWriter> writer(new TraceWriter(std::move(options), std::move(*file)));
  // The file prefix and header chunk, written before the thread starts.
  std::string prefix = format::FilePrefix(writer->options_.version);
  absl::Status status = writer->file_.Append(prefix.data(), prefix.size());
  if (!status.ok()) return status;
  writer->WriteChunk(format::ChunkKind::kHeader,
                     HeaderPayload(writer->options_.header, NowNs()));
  if (!writer->status_.ok()) return writer->status_;
  writer->StartThreads();
  return writer;
}

void TraceWriter::StartThreads() {
  thread_ = std::make_unique<std::thread>([this] { Run(); });
  if (options_.sync_interval_ms > 0) {
    // Its own descriptor: Close() may close the file's while a sync is under way.
    sync_fd_ = ::fcntl(file_.fd(), F_DUPFD_CLOEXEC, 0);
    if (sync_fd_ >= 0) {
      sync_thread_ = std::make_unique<std::thread>([this, fd = sync_fd_] { SyncLoop(fd); });
    }
  }
}

TraceWriter::TraceWriter(TraceWriterOptions options, MappedFile file)
    : options_(std::move(options)),
      id_(g_next_writer_id.fetch_add(1)),
      fork_epoch_(ForkEpoch()),
      stacks_(options_.stacks != nullptr ? options_.stacks : std::make_shared<StackTable>()),
      file_(std::move(file)),
      live_(options_.track_live_blocks ? std::make_unique<SegmentLiveBlocks>() : nullptr) {}

TraceWriter::~TraceWriter() {
  if (fork_epoch_ != g_fork_epoch.load(std::memory_order_relaxed)) {
    // A forked child: the writer thread does not exist here and the file is the parent's.
    (void)thread_.release();
    (void)sync_thread_.release();
    if (sync_fd_ >= 0) ::close(sync_fd_);
    file_.Abandon();
    return;
  }
  (void)Close();
}

void TraceWriter::SyncLoop(int fd) {
  pthread_setname_np(pthread_self(), "gpumem-sync");
  const auto interval = std::chrono::milliseconds(options_.sync_interval_ms);
  std::uint64_t synced = 0;
  std::unique_lock<std::mutex> lock(sync_mu_);
  while (!sync_cv_.wait_for(lock, interval, [&] { return sync_stop_; })) {
    const std::uint64_t written = chunks_written_.load(std::memory_order_acquire);
    if (written == synced) continue;
    lock.unlock();
    // Chunks are in the page cache once copied; this puts every one written before it on
    // the disk. Journal pages go along (a page written back takes one minor fault on its
    // next record).
    if (::fdatasync(fd) == 0) chunks_synced_.store(written, std::memory_order_release);
    synced = written;
    lock.lock();
  }
  ::close(fd);
}

void TraceWriter::StopSyncing() {
  if (sync_thread_ == nullptr || !sync_thread_->joinable()) return;
  {
    std::lock_guard<std::mutex> lock(sync_mu_);
    sync_stop_ = true;
  }
  sync_cv_.notify_one();
  sync_thread_->join();
}

TraceWriter::Ring* TraceWriter::ThreadRing() {
  if (t_last_writer == id_) return static_cast<Ring*>(t_last_ring);
  if (t_exiting) return nullptr;
  for (const ThreadRings::Entry& e : t_rings.entries) {
    if (e.writer_id == id_) {
      t_last_writer = id_;
      t_last_ring = e.ring;
      return static_cast<Ring*>(e.ring);
    }
  }
  std::shared_ptr<Ring> ring;
  {
    std::lock_guard<std::mutex> lock(rings_mu_);
    if (!free_rings_.empty()) {
      ring = std::move(free_rings_.back());
      free_rings_.pop_back();
      ring->thread_exited.store(false, std::memory_order_relaxed);
      rings_.push_back(ring);
    }
  }
  if (ring == nullptr) {
    ring = NewRing();
    if (ring == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(rings_mu_);
    rings_.push_back(ring);
  }
  t_rings.entries.push_back({id_, ring, ring.get(), &ring->thread_exited});
  t_last_writer = id_;
  t_last_ring = ring.get();
  return ring.get();
}

// A new journal region at the end of the file: a journal chunk whose records are 64-byte
// aligned in the file, mapped on its own. Once per thread alive at once, not per record.
std::shared_ptr<TraceWriter::Ring> TraceWriter::NewRing() {
  const std::uint32_t capacity = RingCapacity(options_.ring_records);
  std::lock_guard<std::mutex> lock(file_mu_);
  // closed_ is set before the last drain and Finish(): a region made now would never be
  // drained, and the file may be gone.
  if (closed_.load()) return nullptr;
  const std::size_t records_at = file_.size() + format::kChunkHeaderSize +
                                 format::kJournalHeaderBytes;
  const auto lead = static_cast<std::uint32_t>(
      (format::kJournalRecordBytes - records_at % format::kJournalRecordBytes) %
      format::kJournalRecordBytes);
  std::string head;
  format::AppendJournalChunkHead(&head, seq_, next_region_, capacity, lead);
  absl::Status s = file_.Append(head.data(), head.size());
  if (!s.ok()) {
    SetError(s);
    return nullptr;
  }
  ++seq_;
  const std::uint32_t id = next_region_++;
  absl::StatusOr<std::size_t> at =
      file_.AppendZeros(std::size_t{capacity} * format::kJournalRecordBytes);
  absl::StatusOr<std::unique_ptr<JournalRegion>> region =
      at.ok() ? JournalRegion::Map(file_.fd(), *at, id, capacity)
              : absl::StatusOr<std::unique_ptr<JournalRegion>>(at.status());
  if (!region.ok()) {
    SetError(region.status());
    return nullptr;
  }
  return std::make_shared<Ring>(std::move(*region));
}

void TraceWriter::SetError(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (status_.ok()) status_ = status;
}

bool TraceWriter::Record(const RawRecord& record) {
  if (closed_.load(std::memory_order_relaxed)) return false;
  if (g_fork_epoch.load(std::memory_order_relaxed) != fork_epoch_) return true;
  Ring* ring = ThreadRing();
  if (ring == nullptr) return !closed_.load(std::memory_order_relaxed);
  // Marked before closed_ is read again; the closer sets closed_, then puts a barrier on
  // every thread and waits for the mark to clear (WaitForRecordsInFlight). So a record
  // either sees closed_ or is in the last drain: a ring trace closes a segment while
  // threads record, and a record that read the old segment a moment before the next one
  // took over is not lost. Plain stores here, no fence.
  ring->in_record.store(1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (closed_.load(std::memory_order_relaxed)) {
    ring->in_record.store(0, std::memory_order_release);
    return false;
  }
  // Counted before the slot is published: recorded() never counts a link, a cap or an
  // annotation as an event (a reader does not, and gpumem_trace_events promises that
  // many events back after a kill).
  auto not_an_event = [ring] {
    ring->not_events.store(ring->not_events.load(std::memory_order_relaxed) + 1,
                           std::memory_order_release);
  };
  if (record.has_autograd && !format::LinkFitsInSlot(record)) {
    not_an_event();
    Append(ring, format::JournalLinkOf(record));
  }
  if (!format::IsEventRecord(record.type)) not_an_event();
  Append(ring, record);
  ring->in_record.store(0, std::memory_order_release);
  return true;
}

void TraceWriter::WaitForRecordsInFlight() {
  BarrierOnEveryThread();
  auto in_flight = [&] {
    std::lock_guard<std::mutex> lock(rings_mu_);
    for (const auto* list : {&rings_, &free_rings_}) {
      for (const auto& ring : *list) {
        if (ring->in_record.load(std::memory_order_acquire) != 0) return true;
      }
    }
    return false;
  };
  // Draining meanwhile: a record under way may wait for room in its ring.
  while (in_flight()) {
    DrainOnce();
    std::this_thread::yield();
  }
}

bool TraceWriter::HeldLocked() const {
  return options_.hold_when_full && !released_ && !stop_ && full();
}

void TraceWriter::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    wake_ = true;
  }
  wake_cv_.notify_one();
}

void TraceWriter::Append(Ring* ring, const RawRecord& record) {
  const std::uint64_t tail = ring->tail.load(std::memory_order_relaxed);
  const std::uint64_t capacity = ring->capacity;
  std::uint64_t head = ring->cached_head;
  if (tail + 1 - head >= capacity / 2) {
    head = ring->head.load(std::memory_order_acquire);
    ring->cached_head = head;
  }
  while (tail - head >= capacity) {
    // Full: the writer is behind. Wake it and wait; never drop a record.
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake_ = true;
    }
    wake_cv_.notify_one();
    std::this_thread::yield();
    head = ring->head.load(std::memory_order_acquire);
    ring->cached_head = head;
  }
  // Fields first, the commit word last: a record cut short by a kill keeps the slot's
  // old commit word, which a reader does not take for this record.
  format::JournalRecord* slot = ring->slot(tail);
  format::FillJournalRecord(record, tail, slot);
  std::atomic_ref<std::uint64_t>(slot->commit).store(tail + 1, std::memory_order_release);
  ring->tail.store(tail + 1, std::memory_order_release);
  // The next records' slots, owned now rather than when they are written: the writer read
  // them a lap ago, and taking them back from the writer's core is a wait that the
  // allocator's unlock would otherwise pay (profiler/prefetch_for_write.h). Two, because an
  // allocation whose autograd link has a slot of its own takes two.
  PrefetchForWrite(ring->slot(tail + 1));
  PrefetchForWrite(ring->slot(tail + 2));
  if (tail + 1 - head == capacity / 2) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake_ = true;
    }
    wake_cv_.notify_one();
  }
}

void TraceWriter::Annotate(std::int32_t device, const std::string& name, bool start) {
  if (closed_.load() || g_fork_epoch.load(std::memory_order_relaxed) != fork_epoch_) return;
  std::lock_guard<std::mutex> lock(mu_);
  annotations_.push_back({NowNs(), device, start, name});
}

void TraceWriter::Flush() {
  if (g_fork_epoch.load(std::memory_order_relaxed) != fork_epoch_) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) return;
  const std::uint64_t target = ++flush_requested_;
  wake_ = true;
  wake_cv_.notify_one();
  flushed_cv_.wait(lock, [&] { return flush_done_ >= target || stop_; });
}

absl::Status TraceWriter::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return status_;
    stop_ = true;
    wake_ = true;
  }
  wake_cv_.notify_one();
  if (thread_ != nullptr && thread_->joinable()) thread_->join();
  StopSyncing();
  closed_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  flushed_cv_.notify_all();
  return status_;
}

std::uint64_t TraceWriter::recorded() const {
  std::lock_guard<std::mutex> lock(rings_mu_);
  // A ring's tail counts every record of its region's life, whichever thread made it,
  // and rings are kept (busy or free) until the writer goes.
  // The tail first: a record it counts that is no event is then counted in `not_events` too.
  auto events = [](const Ring& ring) {
    const std::uint64_t tail = ring.tail.load(std::memory_order_acquire);
    return tail - ring.not_events.load(std::memory_order_acquire);
  };
  std::uint64_t n = 0;
  for (const auto& ring : rings_) n += events(*ring);
  for (const auto& ring : free_rings_) n += events(*ring);
  return n;
}

absl::Status TraceWriter::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void TraceWriter::Run() {
  // Named, so that top, perf and tests/gpu/thread_times.py tell its time from the
  // training's (a thread's name is at most 15 characters).
  pthread_setname_np(pthread_self(), "gpumem-writer");
  const auto interval = std::chrono::milliseconds(std::max(1, options_.flush_interval_ms));
  while (true) {
    std::uint64_t flush_target;
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A held segment sleeps through its threads' calls for room (they wait for the
      // next segment, not for it).
      wake_cv_.wait_for(lock, interval, [&] {
        return stop_ || checkpoint_.has_value() || (wake_ && !HeldLocked());
      });
      wake_ = false;
      flush_target = flush_requested_;
      stop = stop_;
    }
    DrainOnce();
    if (stop) {
      Finish();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    flush_done_ = std::max(flush_done_, flush_target);
    flushed_cv_.notify_all();
  }
}

void TraceWriter::Finish() {
  // Threads that recorded while Close() began are drained already; close the door, let
  // records under way finish, and drain once more for them.
  closed_.store(true);
  WaitForRecordsInFlight();
  DrainOnce();
  std::uint32_t chunks;
  {
    std::lock_guard<std::mutex> lock(file_mu_);
    chunks = seq_ + 1;  // including the end chunk
  }
  std::string payload;
  format::PutVarint(&payload, written_events_);
  format::PutVarint(&payload, chunks);
  WriteChunk(format::ChunkKind::kEnd, payload);
  absl::Status finished;
  {
    std::lock_guard<std::mutex> rings_lock(rings_mu_);
    std::lock_guard<std::mutex> lock(file_mu_);
    // Every record is in the chunks now, and readers ignore the journal of a finished
    // file: give its regions' disk space back.
    for (const auto& ring : rings_) ring->region->Release(file_.fd());
    for (const auto& ring : free_rings_) ring->region->Release(file_.fd());
    finished = file_.Finish();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (status_.ok()) status_ = finished;
  flush_done_ = flush_requested_;
  flushed_cv_.notify_all();
}

void TraceWriter::DrainOnce() {
  batch_.clear();
  // Before the definitions: the checkpoint's stacks were made before it was handed over.
  std::optional<std::vector<RawRecord>> checkpoint;
  bool held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    checkpoint.swap(checkpoint_);
    held = HeldLocked();
  }
  std::vector<Drained> drained;
  // Held: the records stay in the journal, in the file, until the next segment takes over.
  if (!held) drained = DrainRings();
  WriteBatch();
  if (live_ != nullptr) {
    ++drains_;
    for (const Pending& p : batch_) live_->Apply(p.record, drains_);
    if (checkpoint) WriteCheckpoint(*checkpoint);
    live_->EndDrain(drains_);
  }
  NoteFileSize();
  ReleaseDrained(drained);
}

std::vector<TraceWriter::Drained> TraceWriter::DrainRings() {
  std::vector<std::shared_ptr<Ring>> rings;
  {
    std::lock_guard<std::mutex> lock(rings_mu_);
    rings = rings_;
  }
  std::vector<Drained> drained;
  drained.reserve(rings.size());
  for (const std::shared_ptr<Ring>& ring : rings) drained.push_back(DrainRing(ring.get()));
  return drained;
}

TraceWriter::Drained TraceWriter::DrainRing(Ring* ring) {
  // Exited first: then every record its thread made is below the tail read after it.
  const bool exited = ring->thread_exited.load(std::memory_order_acquire);
  const std::uint64_t head = ring->head.load(std::memory_order_relaxed);
  const std::uint64_t tail = ring->tail.load(std::memory_order_acquire);
  const JournalRegion& region = *ring->region;
  RawRecord link;  // an autograd link slot, for the allocation after it
  bool linked = false;
  for (std::uint64_t i = head; i < tail; ++i) {
    RawRecord r = format::RecordOfSlot(*region.slot(i));
    if (r.type == format::RecordType::kAutograd) {
      link = r;
      linked = true;
      continue;
    }
    if (linked && r.type == format::RecordType::kAlloc) format::AttachJournalLink(link, &r);
    linked = false;
    batch_.push_back({r, region.id(), i});
  }
  // A link whose allocation is not published yet is read again with it next time.
  return {ring, linked ? tail - 1 : tail, exited};
}

void TraceWriter::WriteBatch() {
  // Definitions are taken after the rings: a stack is queued before any record that uses
  // it is published, so every id in this batch is defined here or earlier.
  std::vector<FrameDef> frames;
  std::vector<StackDef> stacks;
  stacks_->TakeSince(&definitions_, &frames, &stacks);
  std::vector<PendingAnnotation> annotations;
  {
    std::lock_guard<std::mutex> lock(mu_);
    annotations.swap(annotations_);
  }
  if (batch_.empty() && frames.empty() && stacks.empty() && annotations.empty()) return;
  // Stable: a region's records keep their order (one thread at a time, its clock never
  // goes back), so each chunk holds a contiguous run of every region it touches and
  // its journal marks say exactly which records it holds.
  std::stable_sort(batch_.begin(), batch_.end(), [](const Pending& a, const Pending& b) {
    return a.record.time_ns < b.record.time_ns;
  });
  ChunkEncoder encoder;
  for (const FrameDef& f : frames) encoder.AddFrame(f);
  for (const StackDef& s : stacks) encoder.AddStack(s);
  for (const PendingAnnotation& a : annotations) {
    encoder.AddAnnotation(a.time_ns, a.device, a.start, a.name);
  }
  std::map<std::uint32_t, std::uint64_t> marks;  // region -> next index, this chunk
  auto write = [&] {
    for (const auto& [region, next] : marks) encoder.AddJournalMark(region, next);
    WriteChunk(format::ChunkKind::kRecords, encoder.payload());
    written_events_ += encoder.events();
    encoder.Reset();
    marks.clear();
  };
  for (const Pending& p : batch_) {
    encoder.AddEvent(p.record);
    marks[p.region] = p.index + 1;
    if (encoder.events() >= options_.records_per_chunk) write();
  }
  if (!encoder.payload().empty()) write();
}

void TraceWriter::ReleaseDrained(const std::vector<Drained>& drained) {
  // The chunks are in the file: the slots they hold may be written again.
  for (const Drained& d : drained) d.ring->head.store(d.tail, std::memory_order_release);
  std::lock_guard<std::mutex> lock(rings_mu_);
  for (const Drained& d : drained) {
    if (!d.exited) continue;
    auto it = std::find_if(rings_.begin(), rings_.end(),
                           [&](const std::shared_ptr<Ring>& r) { return r.get() == d.ring; });
    free_rings_.push_back(std::move(*it));
    rings_.erase(it);
  }
}

void TraceWriter::WriteCheckpoint(const std::vector<RawRecord>& blocks) {
  ChunkEncoder encoder;
  for (const RawRecord& b : blocks) encoder.AddEvent(b);
  // One chunk, even empty (it says the segment has its checkpoint): whole or absent.
  const std::size_t before = file_bytes();
  WriteChunk(format::ChunkKind::kCheckpoint, encoder.payload());
  checkpoint_bytes_.store(file_bytes() - before, std::memory_order_release);
  live_->SetStart(blocks);
}

void TraceWriter::NoteFileSize() {
  if (options_.full_bytes == 0 || full() || !options_.on_full) return;
  if (file_bytes() < options_.full_bytes) return;
  full_said_.store(true, std::memory_order_release);
  options_.on_full();
}

std::size_t TraceWriter::file_bytes() {
  std::lock_guard<std::mutex> lock(file_mu_);
  return file_.size();
}

void TraceWriter::SetCheckpoint(std::vector<RawRecord> blocks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    checkpoint_ = std::move(blocks);
    wake_ = true;
  }
  wake_cv_.notify_one();
}

std::vector<RawRecord> TraceWriter::LiveBlocks() const {
  return live_ != nullptr ? live_->Live() : std::vector<RawRecord>{};
}

void TraceWriter::WriteChunk(format::ChunkKind kind, const std::string& payload) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status_.ok()) return;
  }
  std::string chunk;
  std::lock_guard<std::mutex> lock(file_mu_);
  format::AppendChunk(&chunk, kind, seq_++, payload, options_.zstd_level);
  absl::Status s = file_.Append(chunk.data(), chunk.size());
  if (!s.ok()) {
    SetError(s);
    return;
  }
  chunks_written_.fetch_add(1, std::memory_order_release);
}

}  // namespace gpumem
