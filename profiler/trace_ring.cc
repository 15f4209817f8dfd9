#include "profiler/trace_ring.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "profiler/trace_format.h"
#include "profiler/trace_path.h"

namespace gpumem {
namespace {

std::string Folder(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

std::string FileName(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

absl::StatusOr<std::unique_ptr<TraceRing>> TraceRing::Open(TraceRingOptions options) {
  if (options.max_bytes > 0 && options.segments < 2) {
    return absl::InvalidArgumentError("a bounded trace needs at least 2 segments");
  }
  std::unique_ptr<TraceRing> ring(new TraceRing(std::move(options)));
  if (!ring->bounded()) {
    TraceWriterOptions o = ring->options_.writer;
    o.stacks = ring->stacks_;
    absl::StatusOr<std::unique_ptr<TraceWriter>> w = TraceWriter::Open(std::move(o));
    if (!w.ok()) return w.status();
    ring->writer_ = std::move(*w);
    ring->path_ = ring->writer_->path();
  } else if (absl::Status s = ring->OpenFirst(); !s.ok()) {
    return s;
  }
  ring->current_.store(ring->writer_.get(), std::memory_order_release);
  return ring;
}

TraceRing::TraceRing(TraceRingOptions options)
    : options_(std::move(options)),
      owner_pid_(::getpid()),
      stacks_(options_.writer.stacks != nullptr ? options_.writer.stacks
                                                 : std::make_shared<StackTable>()),
      path_(options_.writer.path) {}

TraceRing::~TraceRing() { (void)Close(); }

std::string TraceRing::SegmentPath(std::uint64_t k) const {
  return Folder(path_) + format::RingSegmentName(FileName(path_), k);
}

absl::Status TraceRing::OpenFirst() {
  std::random_device random;
  ring_id_ = absl::StrFormat("%08x%08x", random(), random());
  origin_ns_ = TraceWriter::NowNs();
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  start_unix_ns_ = std::int64_t{wall.tv_sec} * 1000000000 + wall.tv_nsec;
  absl::StatusOr<std::unique_ptr<TraceWriter>> first = OpenSegment(0);
  if (first.ok() && (*first)->path() != SegmentPath(0)) {
    // Another live process records under this name: the whole ring moves aside.
    const std::string moved = (*first)->path();
    (void)(*first)->Close();
    ::unlink(moved.c_str());
    const std::string taken = path_;
    path_ = PathWithPid(path_, owner_pid_);
    std::fprintf(stderr, "gpumem: %s is being written by another process; this one (pid %ld) "
                 "writes %s\n", taken.c_str(), owner_pid_, path_.c_str());
    first = OpenSegment(0);
  }
  if (!first.ok()) return first.status();
  writer_ = std::move(*first);
  // An earlier run's segments under this name are not this ring's: they would count
  // against its bound.
  for (std::uint64_t k = 1; Exists(SegmentPath(k)); ++k) ::unlink(SegmentPath(k).c_str());
  kept_.push_back(0);
  PointLinkAt(0);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceRing::OpenSegment(std::uint64_t k) {
  TraceWriterOptions o = options_.writer;
  o.path = SegmentPath(k);
  o.stacks = stacks_;
  o.version = format::kRingVersion;
  o.track_live_blocks = true;
  const std::uint64_t share = options_.max_bytes / options_.segments;
  o.full_bytes = share;
  o.on_full = [this] { OnFull(); };
  o.hold_when_full = true;
  // Reserved space is on the disk: at most a sixteenth of a segment ahead.
  o.max_growth = std::max<std::size_t>(share / 16, 16 << 10);
  o.header["ring_id"] = ring_id_;
  o.header["ring_segment"] = std::to_string(k);
  o.header["ring_max_bytes"] = std::to_string(options_.max_bytes);
  o.header["ring_segments"] = std::to_string(options_.segments);
  o.header["ring_base"] = FileName(path_);
  o.header["clock_origin_ns"] = std::to_string(origin_ns_);
  o.header["start_unix_ns"] = std::to_string(start_unix_ns_);
  return TraceWriter::Open(std::move(o));
}

// The trace's name always opens the newest segment: a new link renamed over the old one.
void TraceRing::PointLinkAt(std::uint64_t k) {
  const std::string temp = path_ + ".link";
  ::unlink(temp.c_str());
  if (::symlink(format::RingSegmentName(FileName(path_), k).c_str(), temp.c_str()) != 0 ||
      ::rename(temp.c_str(), path_.c_str()) != 0) {
    std::fprintf(stderr, "gpumem: trace ring: cannot point %s at segment %llu\n",
                 path_.c_str(), static_cast<unsigned long long>(k));
  }
}

void TraceRing::Start(std::function<void(TraceWriter*)> publish) {
  if (!bounded() || thread_ != nullptr) return;
  publish_ = std::move(publish);
  thread_ = std::make_unique<std::thread>([this] { Run(); });
}

void TraceRing::Record(const RawRecord& r) {
  TraceWriter* w = current();
  while (!w->Record(r)) {
    TraceWriter* next = current();
    if (next == w) return;  // closed
    w = next;
  }
}

// On the full segment's writer thread, at once: the spare takes the records from here on,
// so a segment outgrows its share by one drain, however late the ring's thread runs.
void TraceRing::OnFull() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (spare_ != nullptr && !swapped_) {
      TraceWriter* full = current();
      CountAtSwap(full);
      Publish(spare_.get());
      swapped_ = true;
      full->Release();
    }
    full_ = true;
  }
  cv_.notify_one();
}

// The old segment's records join the count as the new one takes over, so that recorded()
// never drops while a rotation is under way.
void TraceRing::CountAtSwap(TraceWriter* old) {
  counted_at_swap_ = old->recorded();
  recorded_before_.fetch_add(counted_at_swap_, std::memory_order_acq_rel);
}

void TraceRing::Publish(TraceWriter* w) {
  current_.store(w, std::memory_order_release);
  if (publish_) publish_(w);
}

// The next segment, opened ahead. The oldest goes first: with the spare, the files never
// number more than `segments`, and a kill in between leaves one fewer.
void TraceRing::PrepareSpare() {
  while (kept_.size() + 1 >= options_.segments) {
    ::unlink(SegmentPath(kept_.front()).c_str());
    kept_.pop_front();
  }
  absl::StatusOr<std::unique_ptr<TraceWriter>> opened = OpenSegment(segment() + 1);
  if (!opened.ok()) {
    std::fprintf(stderr, "gpumem: trace ring: cannot open segment %llu (%s); segment %llu "
                 "grows on\n", static_cast<unsigned long long>(segment() + 1),
                 std::string(opened.status().message()).c_str(),
                 static_cast<unsigned long long>(segment()));
    return;
  }
  // Every definition so far in the file before a record can come: a run killed just
  // after the spare took over still names its records' stacks.
  (*opened)->Flush();
  std::lock_guard<std::mutex> lock(mu_);
  spare_ = std::move(*opened);
}

void TraceRing::Run() {
  pthread_setname_np(pthread_self(), "gpumem-ring");
  PrepareSpare();
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return full_ || stop_; });
    if (stop_) return;
    full_ = false;
    lock.unlock();
    Rotate();
    lock.lock();
    // The new segment may have filled while this one rotated (its word came before
    // full_ was cleared): rotate again.
    if (writer_ != nullptr && writer_->full()) full_ = true;
  }
}

void TraceRing::Rotate() {
  const std::uint64_t next = segment() + 1;
  std::unique_ptr<TraceWriter> opened;
  bool published;
  {
    std::lock_guard<std::mutex> lock(mu_);
    opened = std::move(spare_);
    published = std::exchange(swapped_, false);
  }
  if (opened == nullptr) {
    PrepareSpare();  // it failed before (a full disk?): once more
    std::lock_guard<std::mutex> lock(mu_);
    opened = std::move(spare_);
  }
  if (opened == nullptr) return;  // PrepareSpare said why
  if (!published) {
    CountAtSwap(writer_.get());
    Publish(opened.get());
  }
  std::unique_ptr<TraceWriter> old = std::move(writer_);
  old->Release();
  writer_ = std::move(opened);
  segment_.store(next, std::memory_order_release);
  kept_.push_back(next);
  PointLinkAt(next);
  // Closing drains what raced into the old segment; then its live set is complete.
  if (absl::Status s = old->Close(); !s.ok()) {
    std::fprintf(stderr, "gpumem: trace ring: closing segment %llu: %s\n",
                 static_cast<unsigned long long>(next - 1), std::string(s.message()).c_str());
  }
  // What raced into the old segment after the swap.
  recorded_before_.fetch_add(old->recorded() - counted_at_swap_, std::memory_order_acq_rel);
  std::vector<RawRecord> live = old->LiveBlocks();
  const std::size_t blocks = live.size();
  writer_->SetCheckpoint(std::move(live));
  writer_->Flush();
  retired_ = std::move(old);
  const std::uint64_t share = options_.max_bytes / options_.segments;
  if (!crowded_said_ && writer_->checkpoint_bytes() > share / 2) {
    crowded_said_ = true;
    std::fprintf(stderr, "gpumem: trace ring: segment %llu starts with a checkpoint of %zu "
                 "bytes (%zu live blocks and device ranges), over half of its %llu: GPUMEM_TRACE_MAX=%llu keeps "
                 "little history; raise it\n",
                 static_cast<unsigned long long>(next), writer_->checkpoint_bytes(), blocks,
                 static_cast<unsigned long long>(share),
                 static_cast<unsigned long long>(options_.max_bytes));
  }
  PrepareSpare();
}

absl::Status TraceRing::Close() {
  StopRotating();
  // Closing twice is harmless: a writer closes once.
  absl::Status status = writer_ != nullptr ? writer_->Close() : absl::OkStatus();
  if (::getpid() != owner_pid_) return status;
  retired_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  if (spare_ != nullptr && !swapped_) {
    // Never written: it would read as an empty last segment.
    const std::string spare = spare_->path();
    (void)spare_->Close();
    spare_.reset();
    ::unlink(spare.c_str());
  }
  return status;
}

void TraceRing::StopRotating() {
  if (::getpid() != owner_pid_) {
    (void)thread_.release();  // a forked child: the thread is the parent's
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_ != nullptr && thread_->joinable()) thread_->join();
}

}  // namespace gpumem
