#include "profiler/trace_writer.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "profiler/chunk_encoder.h"

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

std::size_t RoundUpPow2(std::size_t n) {
  std::size_t p = 16;
  while (p < n) p <<= 1;
  return p;
}

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

}  // namespace

// A single-producer (its thread) single-consumer (the writer thread) ring.
struct TraceWriter::Ring {
  explicit Ring(std::size_t capacity)
      : slots(new RawRecord[capacity]), mask(capacity - 1) {}
  std::unique_ptr<RawRecord[]> slots;
  const std::size_t mask;
  alignas(64) std::atomic<std::uint64_t> head{0};  // next to read (writer thread)
  alignas(64) std::atomic<std::uint64_t> tail{0};  // next to write (owning thread)
  std::atomic<bool> thread_exited{false};
};

namespace {

// Each thread's rings, one per writer it has recorded into. On thread exit the rings are
// marked so the writer drops them once drained.
struct ThreadRings {
  struct Entry {
    std::uint64_t writer_id;
    std::shared_ptr<void> keep;  // the Ring, kept alive for the writer to drain
    void* ring;
    std::atomic<bool>* exited;
  };
  std::vector<Entry> entries;
  ~ThreadRings() {
    for (Entry& e : entries) e.exited->store(true, std::memory_order_release);
  }
};
thread_local ThreadRings t_rings;
thread_local std::uint64_t t_last_writer = 0;
thread_local void* t_last_ring = nullptr;

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

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(TraceWriterOptions options) {
  absl::StatusOr<MappedFile> file = MappedFile::Create(options.path);
  if (!file.ok()) return file.status();
  std::unique_ptr<TraceWriter> writer(new TraceWriter(std::move(options), std::move(*file)));
  // The file prefix and header chunk, written before the thread starts.
  std::map<std::string, std::string> header = writer->options_.header;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  header["pid"] = std::to_string(getpid());
  header["rank"] = EnvOr("RANK", "");
  header["local_rank"] = EnvOr("LOCAL_RANK", "");
  header["world_size"] = EnvOr("WORLD_SIZE", "");
  header["host"] = host;
  header["clock_origin_ns"] = std::to_string(NowNs());
  header["start_unix_ns"] =
      std::to_string(std::int64_t{wall.tv_sec} * 1000000000 + wall.tv_nsec);
  std::string payload;
  format::PutVarint(&payload, header.size());
  for (const auto& [key, value] : header) {
    format::PutString(&payload, key);
    format::PutString(&payload, value);
  }
  std::string prefix = format::FilePrefix();
  absl::Status status = writer->file_.Append(prefix.data(), prefix.size());
  if (!status.ok()) return status;
  writer->WriteChunk(format::ChunkKind::kHeader, payload);
  if (!writer->status_.ok()) return writer->status_;
  writer->thread_ = std::make_unique<std::thread>([w = writer.get()] { w->Run(); });
  return writer;
}

TraceWriter::TraceWriter(TraceWriterOptions options, MappedFile file)
    : options_(std::move(options)),
      id_(g_next_writer_id.fetch_add(1)),
      fork_epoch_(ForkEpoch()),
      file_(std::move(file)) {}

TraceWriter::~TraceWriter() {
  if (fork_epoch_ != g_fork_epoch.load(std::memory_order_relaxed)) {
    // A forked child: the writer thread does not exist here and the file is the parent's.
    (void)thread_.release();
    file_.Abandon();
    return;
  }
  (void)Close();
}

TraceWriter::Ring* TraceWriter::ThreadRing() {
  if (t_last_writer == id_) return static_cast<Ring*>(t_last_ring);
  for (const ThreadRings::Entry& e : t_rings.entries) {
    if (e.writer_id == id_) {
      t_last_writer = id_;
      t_last_ring = e.ring;
      return static_cast<Ring*>(e.ring);
    }
  }
  auto ring = std::make_shared<Ring>(RoundUpPow2(options_.ring_records));
  {
    std::lock_guard<std::mutex> lock(rings_mu_);
    rings_.push_back(ring);
  }
  t_rings.entries.push_back({id_, ring, ring.get(), &ring->thread_exited});
  t_last_writer = id_;
  t_last_ring = ring.get();
  return ring.get();
}

void TraceWriter::Record(const RawRecord& record) {
  if (closed_.load(std::memory_order_relaxed) ||
      g_fork_epoch.load(std::memory_order_relaxed) != fork_epoch_) {
    return;
  }
  Ring* ring = ThreadRing();
  const std::uint64_t tail = ring->tail.load(std::memory_order_relaxed);
  std::uint64_t head = ring->head.load(std::memory_order_acquire);
  const std::uint64_t capacity = ring->mask + 1;
  while (tail - head >= capacity) {
    // Full: the writer is behind. Wake it and wait; never drop a record.
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake_ = true;
    }
    wake_cv_.notify_one();
    std::this_thread::yield();
    head = ring->head.load(std::memory_order_acquire);
  }
  ring->slots[tail & ring->mask] = record;
  ring->tail.store(tail + 1, std::memory_order_release);
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
  closed_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  flushed_cv_.notify_all();
  return status_;
}

std::uint64_t TraceWriter::recorded() const {
  std::lock_guard<std::mutex> lock(rings_mu_);
  std::uint64_t n = retired_records_;
  for (const auto& ring : rings_) n += ring->tail.load(std::memory_order_acquire);
  return n;
}

absl::Status TraceWriter::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void TraceWriter::Run() {
  const auto interval = std::chrono::milliseconds(std::max(1, options_.flush_interval_ms));
  while (true) {
    std::uint64_t flush_target;
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_cv_.wait_for(lock, interval, [&] { return wake_ || stop_; });
      wake_ = false;
      flush_target = flush_requested_;
      stop = stop_;
    }
    DrainOnce();
    if (stop) {
      // Threads that recorded while Close() began are drained above; close the door and
      // drain once more for records that raced with it.
      closed_.store(true);
      DrainOnce();
      std::string payload;
      format::PutVarint(&payload, written_events_);
      format::PutVarint(&payload, seq_ + 1);  // chunks including this one
      WriteChunk(format::ChunkKind::kEnd, payload);
      absl::Status finished = file_.Finish();
      std::lock_guard<std::mutex> lock(mu_);
      if (status_.ok()) status_ = finished;
      flush_done_ = flush_requested_;
      flushed_cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    flush_done_ = std::max(flush_done_, flush_target);
    flushed_cv_.notify_all();
  }
}

void TraceWriter::DrainOnce() {
  batch_.clear();
  std::vector<std::shared_ptr<Ring>> rings;
  {
    std::lock_guard<std::mutex> lock(rings_mu_);
    rings = rings_;
  }
  for (const std::shared_ptr<Ring>& ring : rings) {
    const bool exited = ring->thread_exited.load(std::memory_order_acquire);
    const std::uint64_t head = ring->head.load(std::memory_order_relaxed);
    const std::uint64_t tail = ring->tail.load(std::memory_order_acquire);
    for (std::uint64_t i = head; i < tail; ++i) batch_.push_back(ring->slots[i & ring->mask]);
    ring->head.store(tail, std::memory_order_release);
    if (exited) {
      std::lock_guard<std::mutex> lock(rings_mu_);
      retired_records_ += tail;
      rings_.erase(std::find(rings_.begin(), rings_.end(), ring));
    }
  }
  // Definitions are taken after the rings: a stack is queued before any record that uses
  // it is published, so every id in this batch is defined here or earlier.
  std::vector<FrameDef> frames;
  std::vector<StackDef> stacks;
  stacks_.TakePending(&frames, &stacks);
  std::vector<PendingAnnotation> annotations;
  {
    std::lock_guard<std::mutex> lock(mu_);
    annotations.swap(annotations_);
  }
  if (batch_.empty() && frames.empty() && stacks.empty() && annotations.empty()) return;
  std::stable_sort(batch_.begin(), batch_.end(), [](const RawRecord& a, const RawRecord& b) {
    return a.time_ns < b.time_ns;
  });
  ChunkEncoder encoder;
  for (const FrameDef& f : frames) encoder.AddFrame(f);
  for (const StackDef& s : stacks) encoder.AddStack(s);
  for (const PendingAnnotation& a : annotations) {
    encoder.AddAnnotation(a.time_ns, a.device, a.start, a.name);
  }
  for (const RawRecord& r : batch_) {
    encoder.AddEvent(r);
    if (encoder.events() >= options_.records_per_chunk) {
      WriteChunk(format::ChunkKind::kRecords, encoder.payload());
      written_events_ += encoder.events();
      encoder.Reset();
    }
  }
  if (!encoder.payload().empty()) {
    WriteChunk(format::ChunkKind::kRecords, encoder.payload());
    written_events_ += encoder.events();
  }
}

void TraceWriter::WriteChunk(format::ChunkKind kind, const std::string& payload) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status_.ok()) return;
  }
  std::string chunk;
  format::AppendChunk(&chunk, kind, seq_++, payload, options_.zstd_level);
  absl::Status s = file_.Append(chunk.data(), chunk.size());
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
  }
}

}  // namespace gpumem
