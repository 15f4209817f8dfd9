#include "tools/trace/gpumem_reader.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "profiler/journal_format.h"
#include "profiler/trace_format.h"
#include "tools/trace/autograd_links.h"
#include "tools/trace/event_buffer.h"
#include "tools/trace/frame_table.h"

namespace gpumem::trace {
namespace {

// Rank, local rank, world size, pid and host from the header (empty values: not in a job).
void ReadRunInfo(const std::map<std::string, std::string>& header, RunInfo* run) {
  for (auto [key, field] : {std::pair{"rank", &run->rank},
                            std::pair{"local_rank", &run->local_rank},
                            std::pair{"world_size", &run->world_size},
                            std::pair{"pid", &run->pid},
                            std::pair{"clock_origin_ns", &run->clock_origin_ns}}) {
    std::int64_t value;
    auto it = header.find(key);
    if (it != header.end() && absl::SimpleAtoi(it->second, &value)) *field = value;
  }
  if (auto it = header.find("host"); it != header.end()) run->host = it->second;
}

using format::ByteReader;
using format::RecordType;
using format::UnZigZag;

std::optional<Action> ActionOf(RecordType type) {
  switch (type) {
    case RecordType::kAlloc: return Action::kAlloc;
    case RecordType::kFree: return Action::kFreeRequested;
    case RecordType::kMap: return Action::kSegmentMap;
    case RecordType::kUnmap: return Action::kSegmentUnmap;
    case RecordType::kOom: return Action::kOom;
    case RecordType::kStep: return Action::kStep;
    case RecordType::kSegmentAlloc: return Action::kSegmentAlloc;
    case RecordType::kSegmentFree: return Action::kSegmentFree;
    default: return std::nullopt;
  }
}

StepSource StepSourceOf(std::uint64_t extra) {
  constexpr auto kLast = static_cast<std::uint64_t>(format::kLastStepSource);
  const auto s = static_cast<format::StepSource>(extra <= kLast ? extra : 0);
  switch (s) {
    case format::StepSource::kExplicit: return StepSource::kExplicit;
    case format::StepSource::kOptimizerHook: return StepSource::kOptimizerHook;
    case format::StepSource::kBackward: return StepSource::kBackward;
    case format::StepSource::kModelCall: return StepSource::kModelCall;
    case format::StepSource::kGraphReplay: return StepSource::kGraphReplay;
    case format::StepSource::kModelCallAwaitingBackward:
      return StepSource::kModelCallAwaitingBackward;
    case format::StepSource::kUnknown: break;
  }
  return StepSource::kUnknown;
}

CapacitySource CapacitySourceOf(std::uint64_t extra) {
  // The two enums share their values (trace.h mirrors trace_format.h).
  return static_cast<CapacitySource>(extra <= format::kMaxCapacitySource ? extra : 0);
}

// Time stays in nanoseconds and the stack id the file's until Build().
FailedAllocation FailedAllocationOf(const Event& e, std::optional<std::uint64_t> extra) {
  const std::uint64_t api = format::FailedCallApi(e.addr);
  FailedAllocation f;
  f.time_us = e.time_us;
  f.device = e.device;
  f.size = e.size;
  f.call = format::MemoryApiName(api);
  f.runtime = api <= format::kMaxMemoryApi &&
              format::IsRuntimeApi(static_cast<format::MemoryApi>(api));
  f.error = format::FailedCallError(e.addr);
  f.device_free = extra;
  f.stack_id = e.stack_id;
  return f;
}

// Microseconds from the clock origin; wraps rather than overflows on garbage times.
std::int64_t SinceOrigin(std::int64_t ns, std::int64_t origin) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(ns) -
                                   static_cast<std::uint64_t>(origin)) / 1000;
}

class Reader {
 public:
  Reader(absl::string_view data, const std::string& name, GpumemFileInfo* info)
      : data_(reinterpret_cast<const unsigned char*>(data.data())),
        size_(data.size()),
        name_(name),
        info_(info) {}

  absl::StatusOr<Trace> Read();

 private:
  // Decoding state of one records chunk: deltas and links restart with every chunk.
  struct ChunkState {
    Event prev{};
    bool have_prev = false;
    std::optional<AutogradLink> link;  // applies to the next event record
  };

  // True if a chunk with a valid header and checksum starts at `pos`.
  std::optional<format::ChunkHeader> ValidChunkAt(std::size_t pos) const;
  // A journal chunk whose checked head is whole but whose slots run past the end of the
  // file (a killed run's file, cut short): its slots before the end still read.
  std::optional<format::ChunkHeader> CutJournalAt(std::size_t pos) const;
  std::size_t FindNextChunk(std::size_t from) const;
  // Reads chunks from the file prefix on; returns where the data stops and why.
  std::size_t ReadChunks(std::string* stop_reason);
  void ReadChunk(std::size_t pos, const format::ChunkHeader& h);
  bool ReadRecords(const std::string& payload, std::size_t* bad_at);
  // One record after its first byte; false if it is malformed.
  bool ReadRecord(ByteReader& r, std::uint8_t first, ChunkState* state);
  bool ReadFrame(ByteReader& r);
  bool ReadStack(ByteReader& r);
  bool ReadLink(ByteReader& r, ChunkState* state);
  bool ReadMark(ByteReader& r);
  bool ReadAnnotation(ByteReader& r, std::uint8_t flags);
  bool ReadEvent(ByteReader& r, RecordType type, std::uint8_t flags, ChunkState* state);
  void ReadHeader(const std::string& payload, std::size_t pos);
  void ReadJournalChunk(std::size_t pos, const format::ChunkHeader& h);
  void RecoverJournal();
  // The journal records of one region past its last mark, in index order.
  std::vector<std::pair<std::uint64_t, RawRecord>> JournalRecordsPastMark(
      std::uint32_t region, std::uint64_t mark);
  void TakeJournalRecords(const std::vector<std::pair<std::uint64_t, RawRecord>>& found);
  // An unfinished recording: what it kept and lost (Trace::loss and the first warning).
  void DescribeLoss(std::size_t data_end, const std::string& stop_reason);
  // An event-shaped record: an event, or a capacity change (not an event).
  void Take(Event e, RecordType type, std::optional<std::uint64_t> extra);
  void ReadCheckpoint(const std::string& payload, std::size_t pos);
  // The checkpoint's blocks as allocations at the first event's time, before the events.
  // File stack ids -> the trace's.
  using StackIds = absl::flat_hash_map<std::uint32_t, std::uint32_t>;
  void PrependCheckpoint(const StackIds& stack_ids);
  // The trace, once every chunk is read: stacks interned, checkpoint first, times rebased.
  Trace Build();
  // The clock origin (ns), the run's facts and the device capacity, from the header.
  std::int64_t ReadHeaderFacts();
  StackIds InternStacks(FrameTable* table);
  void RemapStacks(const StackIds& stack_ids);
  void InternBackwardNodes(FrameTable* table);
  void RebaseTimes(std::int64_t origin);

  const unsigned char* data_;
  const std::size_t size_;
  const std::string& name_;
  GpumemFileInfo* info_;
  Trace trace_;
  // Read into blocks, moved into the trace's events at the end (10M events must fit
  // without a doubling vector's two copies): until Build(), time_us holds nanoseconds
  // and stack_id the file's own id.
  EventBuffer events_;
  absl::flat_hash_map<std::uint32_t, Frame> frames_;
  std::map<std::uint32_t, std::vector<std::uint32_t>> stacks_;  // ordered: stable ids
  // Autograd links with the file's frame ids (node_frame 0: forward).
  std::vector<AutogradLink> links_;
  std::size_t capacity_records_ = 0;  // counted by the end chunk with the events
  std::vector<CapacityChange> capacity_;  // time_us in nanoseconds until Build()
  std::size_t failed_records_ = 0;  // counted by the end chunk with the events
  std::optional<std::uint64_t> end_events_;
  std::optional<std::uint32_t> last_seq_;
  struct JournalSpan {
    std::size_t records_at;  // file offset of slot 0
    std::uint32_t capacity;
    std::uint32_t present;   // slots in the file: capacity unless the file was cut in them
  };
  std::uint64_t bytes_skipped_ = 0;  // damaged stretches resynchronised past
  std::int64_t last_event_ns_ = 0;   // the latest event read
  std::map<std::uint32_t, JournalSpan> journals_;     // by region id
  std::map<std::uint32_t, std::uint64_t> journal_marks_;  // region -> next index
  bool in_checkpoint_ = false;
  std::vector<Event> checkpoint_;  // time in ns and the file's stack ids until Build()
};

std::optional<format::ChunkHeader> Reader::ValidChunkAt(std::size_t pos) const {
  if (size_ - pos < format::kChunkHeaderSize) return std::nullopt;
  std::optional<format::ChunkHeader> h = format::ParseChunkHeader(data_ + pos);
  if (!h) return std::nullopt;
  if (h->stored_len > size_ - pos - format::kChunkHeaderSize) return std::nullopt;
  if (!format::ChunkChecksumOk(data_ + pos, *h)) return std::nullopt;
  return h;
}

std::size_t Reader::FindNextChunk(std::size_t from) const {
  static constexpr unsigned char kSync[4] = {'G', 'M', 'C', 'K'};
  const unsigned char* end = data_ + size_;
  for (const unsigned char* p = data_ + from; p < end;) {
    p = std::search(p, end, kSync, kSync + 4);
    if (p == end) break;
    std::size_t pos = static_cast<std::size_t>(p - data_);
    if (ValidChunkAt(pos)) return pos;
    ++p;
  }
  return size_;
}

void Reader::ReadHeader(const std::string& payload, std::size_t pos) {
  ByteReader r(payload);
  std::uint64_t n;
  bool ok = r.GetVarint(&n);
  for (std::uint64_t i = 0; ok && i < n; ++i) {
    std::string key, value;
    ok = r.GetString(&key) && r.GetString(&value);
    if (ok) info_->header[key] = value;
  }
  if (!ok) trace_.warnings.push_back(absl::StrCat(name_, ": header chunk at offset ", pos,
                                                  " is malformed; kept what it held"));
}

bool Reader::ReadRecords(const std::string& payload, std::size_t* bad_at) {
  ByteReader r(payload);
  ChunkState state;
  while (!r.done()) {
    const std::size_t start = r.pos();
    std::uint8_t first;
    r.GetByte(&first);
    if (!ReadRecord(r, first, &state)) {
      *bad_at = start;
      return false;
    }
  }
  if (state.link) {  // a link with no event after it
    *bad_at = r.pos();
    return false;
  }
  return true;
}

bool Reader::ReadRecord(ByteReader& r, std::uint8_t first, ChunkState* state) {
  const std::uint8_t type = first & 0x0f;
  const std::uint8_t flags = first & 0xf0;
  if (type == 0 || type > format::kMaxRecordType) return false;
  const auto rtype = static_cast<RecordType>(type);
  switch (rtype) {
    case RecordType::kFrame: return ReadFrame(r);
    case RecordType::kStack: return ReadStack(r);
    case RecordType::kAutograd: return ReadLink(r, state);
    case RecordType::kJournalMark: return ReadMark(r);
    case RecordType::kAnnotation: return ReadAnnotation(r, flags);
    default: return ReadEvent(r, rtype, flags, state);
  }
}

bool Reader::ReadFrame(ByteReader& r) {
  std::uint64_t id, line;
  std::uint8_t kind;
  Frame f;
  if (!r.GetVarint(&id) || !r.GetByte(&kind) || !r.GetVarint(&line) ||
      !r.GetString(&f.function) || !r.GetString(&f.filename)) {
    return false;
  }
  f.line = static_cast<std::int32_t>(UnZigZag(line));
  frames_[static_cast<std::uint32_t>(id)] = std::move(f);
  return true;
}

bool Reader::ReadStack(ByteReader& r) {
  std::uint64_t id, n;
  // Each frame id takes a byte at least: a count beyond the chunk is malformed.
  if (!r.GetVarint(&id) || !r.GetVarint(&n) || n > r.remaining()) return false;
  std::vector<std::uint32_t> ids(n);
  for (auto& f : ids) {
    std::uint64_t v;
    if (!r.GetVarint(&v)) return false;
    f = static_cast<std::uint32_t>(v);
  }
  stacks_[static_cast<std::uint32_t>(id)] = std::move(ids);
  return true;
}

bool Reader::ReadLink(ByteReader& r, ChunkState* state) {
  std::uint64_t seq, thread, node;
  if (state->link || !r.GetVarint(&seq) || !r.GetVarint(&thread) || !r.GetVarint(&node)) {
    return false;
  }
  state->link = AutogradLink{0, seq, static_cast<std::uint32_t>(thread), node != 0,
                             static_cast<std::uint32_t>(node)};
  return true;
}

bool Reader::ReadMark(ByteReader& r) {
  std::uint64_t region, next;
  if (!r.GetVarint(&region) || !r.GetVarint(&next) || region > UINT32_MAX) return false;
  std::uint64_t& mark = journal_marks_[static_cast<std::uint32_t>(region)];
  mark = std::max(mark, next);
  return true;
}

bool Reader::ReadAnnotation(ByteReader& r, std::uint8_t flags) {
  std::uint64_t t, device;
  Annotation a;
  if (!r.GetVarint(&t) || !r.GetVarint(&device) || !r.GetString(&a.name)) return false;
  a.start = (flags & format::kFlagAnnotationStart) != 0;
  a.time_us = UnZigZag(t);  // nanoseconds until Build() rebases them
  a.device = static_cast<std::int32_t>(UnZigZag(device));
  trace_.annotations.push_back(std::move(a));
  return true;
}

// Event fields, each delta against the chunk's previous event (docs/trace-format.md).
bool Reader::ReadEvent(ByteReader& r, RecordType type, std::uint8_t flags, ChunkState* state) {
  const Event& prev = state->prev;
  // "Same as before" flags are invalid on a chunk's first event.
  if (!state->have_prev && (flags & (format::kFlagSameThread | format::kFlagSameDeviceStream |
                                     format::kFlagSameStack)) != 0) {
    return false;
  }
  Event e = prev;
  std::uint64_t v;
  if (!r.GetVarint(&v)) return false;
  e.time_us = static_cast<std::int64_t>(static_cast<std::uint64_t>(prev.time_us) +
                                        static_cast<std::uint64_t>(UnZigZag(v)));  // ns
  if ((flags & format::kFlagSameThread) == 0) {
    if (!r.GetVarint(&v)) return false;
    e.thread = static_cast<std::uint32_t>(v);
  }
  if ((flags & format::kFlagSameDeviceStream) == 0) {
    std::uint64_t device;
    if (!r.GetVarint(&device) || !r.GetVarint(&e.stream)) return false;
    e.device = static_cast<std::int32_t>(UnZigZag(device));
  }
  if (!r.GetVarint(&v)) return false;
  e.addr = prev.addr + static_cast<std::uint64_t>(UnZigZag(v));
  if (!r.GetVarint(&e.size)) return false;
  if ((flags & format::kFlagSameStack) == 0) {
    if (!r.GetVarint(&v)) return false;
    e.stack_id = static_cast<std::uint32_t>(v);
  }
  std::optional<std::uint64_t> extra;
  if ((flags & format::kFlagExtra) != 0) {
    if (!r.GetVarint(&v)) return false;
    extra = v;
  }
  if (state->link) {
    // Links name events only.
    if (!format::IsEventRecord(type)) return false;
    state->link->event = events_.size();
    links_.push_back(*state->link);
    state->link.reset();
  }
  Take(e, type, extra);
  state->prev = e;
  state->have_prev = true;
  return true;
}

void Reader::ReadChunk(std::size_t pos, const format::ChunkHeader& h) {
  if (last_seq_ && h.seq != *last_seq_ + 1) {
    trace_.warnings.push_back(absl::StrCat(name_, ": chunk at offset ", pos, " has sequence ",
                                           h.seq, ", expected ", *last_seq_ + 1,
                                           ": chunks are missing before it"));
  }
  last_seq_ = h.seq;
  if (h.kind == format::ChunkKind::kJournal) {
    ReadJournalChunk(pos, h);
    return;
  }
  std::optional<std::string> payload =
      format::DecodePayload(data_ + pos + format::kChunkHeaderSize, h);
  if (!payload) {
    ++info_->corrupt_chunks;
    trace_.warnings.push_back(absl::StrCat(name_, ": chunk at offset ", pos,
                                           " does not decompress; skipped"));
    return;
  }
  ++info_->chunks;
  info_->bytes_used += format::kChunkHeaderSize + h.stored_len;
  switch (h.kind) {
    case format::ChunkKind::kHeader:
      ReadHeader(*payload, pos);
      break;
    case format::ChunkKind::kJournal:
      break;  // handled above
    case format::ChunkKind::kEnd: {
      ByteReader r(*payload);
      std::uint64_t events;
      if (r.GetVarint(&events)) end_events_ = events;
      info_->complete = true;
      break;
    }
    case format::ChunkKind::kCheckpoint:
      ReadCheckpoint(*payload, pos);
      break;
    case format::ChunkKind::kRecords: {
      std::size_t bad_at = 0;
      const std::size_t before = events_.size();
      if (!ReadRecords(*payload, &bad_at)) {
        ++info_->corrupt_chunks;
        trace_.warnings.push_back(absl::StrCat(
            name_, ": chunk at offset ", pos, " has a malformed record at payload byte ",
            bad_at, "; kept the ", events_.size() - before, " events before it"));
      }
      break;
    }
  }
}

void Reader::ReadJournalChunk(std::size_t pos, const format::ChunkHeader& h) {
  const unsigned char* payload = data_ + pos + format::kChunkHeaderSize;
  std::optional<format::JournalHeader> j = format::ParseJournalHeader(payload, h.stored_len);
  if (!j || journals_.count(j->region) != 0) {
    ++info_->corrupt_chunks;
    trace_.warnings.push_back(absl::StrCat(name_, ": journal chunk at offset ", pos,
                                           j ? " repeats a region id" : " is malformed",
                                           "; skipped"));
    return;
  }
  const std::size_t records_at =
      pos + format::kChunkHeaderSize + format::kJournalHeaderBytes + j->lead;
  const std::size_t in_file = size_ > records_at ? size_ - records_at : 0;
  const auto present = static_cast<std::uint32_t>(
      std::min<std::size_t>(j->capacity, in_file / format::kJournalRecordBytes));
  ++info_->chunks;
  info_->bytes_used += std::min<std::size_t>(format::kChunkHeaderSize + h.stored_len, size_ - pos);
  journals_[j->region] = {records_at, j->capacity, present};
}

std::optional<format::ChunkHeader> Reader::CutJournalAt(std::size_t pos) const {
  if (size_ - pos < format::kChunkHeaderSize + format::kJournalHeaderBytes) return std::nullopt;
  std::optional<format::ChunkHeader> h = format::ParseChunkHeader(data_ + pos);
  if (!h || h->kind != format::ChunkKind::kJournal ||
      h->stored_len <= size_ - pos - format::kChunkHeaderSize ||
      !format::ChunkChecksumOk(data_ + pos, *h)) {
    return std::nullopt;
  }
  return h;
}

// A killed writer's last records: in each region, those past the last journal mark (the
// chunks hold the ones before it). Record i sits in slot i % capacity with commit i + 1;
// a slot whose record was being written at the kill still carries an older index.
void Reader::RecoverJournal() {
  for (const auto& [region, span] : journals_) {
    auto mark_it = journal_marks_.find(region);
    const std::uint64_t mark = mark_it == journal_marks_.end() ? 0 : mark_it->second;
    const std::vector<std::pair<std::uint64_t, RawRecord>> found =
        JournalRecordsPastMark(region, mark);
    for (std::size_t i = 0; i < found.size(); ++i) {
      if (found[i].first != mark + i) {
        trace_.warnings.push_back(absl::StrCat(
            name_, ": journal region ", region, " lacks record ", mark + i,
            "; kept the records around the gap"));
        break;
      }
    }
    TakeJournalRecords(found);
  }
  if (info_->journal_damaged > 0) {
    trace_.warnings.push_back(absl::StrCat(name_, ": ", info_->journal_damaged,
                                           " damaged journal records were left out"));
  }
}

std::vector<std::pair<std::uint64_t, RawRecord>> Reader::JournalRecordsPastMark(
    std::uint32_t region, std::uint64_t mark) {
  const JournalSpan& span = journals_.at(region);
  std::vector<std::pair<std::uint64_t, RawRecord>> found;
  for (std::uint32_t p = 0; p < span.present; ++p) {
    const unsigned char* slot =
        data_ + span.records_at + std::size_t{p} * format::kJournalRecordBytes;
    std::uint64_t commit;
    std::memcpy(&commit, slot + offsetof(format::JournalRecord, commit), sizeof(commit));
    if (commit == 0) continue;
    const std::uint64_t index = commit - 1;
    if (index % span.capacity != p || index < mark || index - mark >= span.capacity) {
      continue;  // consumed already, or an older lap's record
    }
    std::optional<RawRecord> r = format::ReadJournalRecord(slot, index);
    if (!r) {
      ++info_->journal_damaged;
      continue;
    }
    found.emplace_back(index, *r);
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return found;
}

void Reader::TakeJournalRecords(const std::vector<std::pair<std::uint64_t, RawRecord>>& found) {
  std::optional<std::pair<std::uint64_t, RawRecord>> link;  // the slot before an alloc
  for (const auto& [index, r] : found) {
    if (r.type == RecordType::kAutograd) {
      link.emplace(index, r);
      continue;
    }
    // A link in a slot of its own, or folded into the allocation's (ReadJournalRecord).
    RawRecord linked = r;
    if (link && link->first + 1 == index && r.type == RecordType::kAlloc) {
      format::AttachJournalLink(link->second, &linked);
    }
    if (linked.has_autograd) {
      links_.push_back(AutogradLink{events_.size(), linked.autograd_seq,
                                    linked.autograd_thread, linked.autograd_node_frame != 0,
                                    linked.autograd_node_frame});
    }
    link.reset();
    Event e{};
    e.time_us = r.time_ns;  // nanoseconds until Build()
    e.thread = r.thread;
    e.device = r.device;
    e.stream = r.stream;
    e.addr = r.addr;
    e.size = r.size;
    e.stack_id = r.stack_id;
    Take(e, r.type, r.has_extra ? std::optional<std::uint64_t>(r.extra) : std::nullopt);
    ++info_->journal_events;
  }
}

// A ring segment's checkpoint: the blocks live when it began (allocated in segments
// before it) and the device memory then held, prepended to the events by Build().
void Reader::ReadCheckpoint(const std::string& payload, std::size_t pos) {
  ++info_->checkpoint_chunks;
  in_checkpoint_ = true;
  std::size_t bad_at = 0;
  if (!ReadRecords(payload, &bad_at)) {
    ++info_->corrupt_chunks;
    trace_.warnings.push_back(absl::StrCat(name_, ": checkpoint chunk at offset ", pos,
                                           " has a malformed record at payload byte ", bad_at,
                                           "; kept the blocks before it"));
  }
  in_checkpoint_ = false;
}

void Reader::Take(Event e, RecordType type, std::optional<std::uint64_t> extra) {
  if (in_checkpoint_) {
    // The cap in force (not counted by the end chunk), the blocks, and the device memory
    // held: segments and mapped ranges.
    if (type == RecordType::kCapacity) {
      capacity_.push_back({e.time_us, e.device, e.size, CapacitySourceOf(extra.value_or(0))});
    }
    if (type == RecordType::kAlloc || type == RecordType::kMap ||
        type == RecordType::kSegmentAlloc) {
      e.action = *ActionOf(type);
      checkpoint_.push_back(e);
    }
    return;
  }
  if (type == RecordType::kFailedAlloc) {
    ++failed_records_;
    trace_.failed_allocations.push_back(FailedAllocationOf(e, extra));
    return;
  }
  if (type == RecordType::kCapacity) {
    ++capacity_records_;
    capacity_.push_back({e.time_us, e.device, e.size, CapacitySourceOf(extra.value_or(0))});
    return;
  }
  e.action = *ActionOf(type);
  e.device_free = 0;
  e.step_source = StepSource::kUnknown;
  if (type == RecordType::kOom && extra) e.device_free = *extra;
  if (type == RecordType::kStep && extra) e.step_source = StepSourceOf(*extra);
  last_event_ns_ = events_.size() == 0 ? e.time_us : std::max(last_event_ns_, e.time_us);
  events_.push_back(e);
}

absl::StatusOr<Trace> Reader::Read() {
  info_->file_bytes = size_;
  trace_.source = name_;
  trace_.format = "gpumem";
  if (size_ < format::kPrefixSize || !format::HasMagic(absl::string_view(
                                         reinterpret_cast<const char*>(data_), size_))) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": not a gpumem trace (bad magic)"));
  }
  const std::uint32_t version = format::GetU32(data_ + 8);
  if (version < format::kOldestReadableVersion || version > format::kNewestReadableVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": gpumem trace version ", version, " is not supported (this reader reads ",
        format::kOldestReadableVersion, " to ", format::kNewestReadableVersion, ")"));
  }
  std::string stop_reason;
  const std::size_t data_end = ReadChunks(&stop_reason);
  if (info_->chunks == 0) {
    return absl::DataLossError(
        absl::StrCat(name_, ": no readable chunk in the file: ", stop_reason.empty()
                                                                     ? "it holds no data"
                                                                     : stop_reason));
  }
  if (!info_->complete) {
    // A finished run compressed every journal record; only a killed one leaves some.
    RecoverJournal();
    const std::size_t kept = events_.size() + capacity_records_ + failed_records_;
    if (kept == 0) {
      return absl::DataLossError(absl::StrCat(
          name_, ": no event is readable: the recording did not finish and the data stops at "
          "offset ", data_end, stop_reason.empty() ? "" : absl::StrCat(": ", stop_reason)));
    }
    DescribeLoss(data_end, stop_reason);
  } else if (end_events_ && *end_events_ != events_.size() + capacity_records_ + failed_records_) {
    trace_.warnings.push_back(absl::StrCat(name_, ": the end chunk counts ", *end_events_,
                                           " events but ", events_.size() + capacity_records_ + failed_records_,
                                           " were read"));
  }
  events_.MoveTo(&trace_.events);
  return Build();
}

std::size_t Reader::ReadChunks(std::string* stop_reason) {
  info_->bytes_used = format::kPrefixSize;
  std::size_t pos = format::kPrefixSize;
  while (pos < size_ && !info_->complete) {
    if (std::all_of(data_ + pos, data_ + size_, [](unsigned char c) { return c == 0; })) {
      *stop_reason = absl::StrCat("the rest (", size_ - pos,
                                  " bytes) is preallocated space never written");
      break;
    }
    if (std::optional<format::ChunkHeader> h = ValidChunkAt(pos)) {
      ReadChunk(pos, *h);
      pos += format::kChunkHeaderSize + h->stored_len;
      continue;
    }
    if (std::optional<format::ChunkHeader> h = CutJournalAt(pos)) {
      ReadChunk(pos, *h);
      *stop_reason = absl::StrCat("the file ends inside the journal chunk at offset ", pos,
                                  " (its slots before the end were read)");
      return size_;
    }
    // Damaged or cut off here: resynchronise on the next valid chunk, if there is one.
    ++info_->corrupt_chunks;
    const std::size_t next = FindNextChunk(pos + 1);
    if (next == size_) {
      std::optional<format::ChunkHeader> h =
          size_ - pos >= format::kChunkHeaderSize ? format::ParseChunkHeader(data_ + pos)
                                                  : std::nullopt;
      const bool cut = h && h->stored_len > size_ - pos - format::kChunkHeaderSize;
      *stop_reason = absl::StrCat(
          cut ? "an incomplete chunk" : "a corrupt chunk", " at offset ", pos, " (",
          size_ - pos, " bytes to the end of the file",
          cut ? absl::StrCat(", ", format::kChunkHeaderSize + h->stored_len - (size_ - pos),
                             " bytes short")
              : ", no valid chunk after it",
          ")");
      break;
    }
    trace_.warnings.push_back(absl::StrCat(name_, ": corrupt chunk at offset ", pos,
                                           "; skipped ", next - pos,
                                           " bytes to the next valid chunk at offset ", next));
    bytes_skipped_ += next - pos;
    pos = next;
  }
  return pos;
}

void Reader::DescribeLoss(std::size_t data_end, const std::string& stop_reason) {
  TraceLoss loss;
  loss.events_kept = events_.size();
  loss.file_bytes = size_;
  loss.bytes_kept = info_->bytes_used;
  loss.data_end = data_end;
  const bool zero_tail = std::all_of(data_ + data_end, data_ + size_,
                                     [](unsigned char c) { return c == 0; });
  loss.bytes_lost = bytes_skipped_ + (zero_tail ? 0 : size_ - data_end);
  const std::int64_t last_ns = last_event_ns_;
  std::int64_t origin = 0;
  auto it = info_->header.find("clock_origin_ns");
  if (it == info_->header.end() || !absl::SimpleAtoi(it->second, &origin)) origin = last_ns;
  loss.last_event_us = events_.size() == 0 ? 0 : SinceOrigin(last_ns, origin);
  const std::size_t in_chunks = events_.size() - info_->journal_events;
  loss.summary = absl::StrCat(
      name_, ": the recording did not finish (no end chunk); recovered ", events_.size(),
      " events: ", in_chunks, " in ", info_->chunks, " chunks (", info_->bytes_used, " of ",
      size_, " bytes) and ", info_->journal_events,
      " from the raw journal (recorded, not yet compressed), the last at ",
      absl::StrFormat("%.3f", static_cast<double>(loss.last_event_us) / 1e6),
      " s after the trace opened; lost ", loss.bytes_lost, " bytes: the data stops at offset ", data_end,
      stop_reason.empty() ? "" : absl::StrCat(": ", stop_reason));
  trace_.warnings.insert(trace_.warnings.begin(), loss.summary);
  trace_.loss = std::move(loss);
}

Trace Reader::Build() {
  const std::int64_t origin = ReadHeaderFacts();
  FrameTable table(&trace_);
  const StackIds stack_ids = InternStacks(&table);
  RemapStacks(stack_ids);
  if (!links_.empty()) {
    InternBackwardNodes(&table);
    AttributeBackward(links_, &table, &trace_);
  }
  PrependCheckpoint(stack_ids);
  RebaseTimes(origin);
  return std::move(trace_);
}

std::int64_t Reader::ReadHeaderFacts() {
  const std::vector<Event>& events = trace_.events;
  std::int64_t origin = events.empty() ? 0 : events.front().time_us;  // ns here
  auto it = info_->header.find("clock_origin_ns");
  if (it != info_->header.end()) (void)absl::SimpleAtoi(it->second, &origin);
  ReadRunInfo(info_->header, &trace_.run);
  it = info_->header.find("device_capacity");
  std::uint64_t capacity;
  if (it != info_->header.end() && absl::SimpleAtoi(it->second, &capacity)) {
    trace_.device_capacity = capacity;
  }
  return origin;
}

Reader::StackIds Reader::InternStacks(FrameTable* table) {
  StackIds stack_ids;  // file id -> ours
  std::uint64_t missing_frames = 0;
  for (const auto& [file_id, frame_ids] : stacks_) {
    std::vector<std::uint32_t> ids;
    ids.reserve(frame_ids.size());
    for (std::uint32_t f : frame_ids) {
      auto fit = frames_.find(f);
      if (fit == frames_.end()) {
        ++missing_frames;
        ids.push_back(table->Intern(Frame{"?", 0, "<frame lost in a damaged chunk>"}));
      } else {
        ids.push_back(table->Intern(fit->second));
      }
    }
    stack_ids[file_id] = table->InternStack(ids);
  }
  if (missing_frames > 0) {
    trace_.warnings.push_back(absl::StrCat(name_, ": ", missing_frames,
                                           " stack frames were defined in damaged chunks"));
  }
  return stack_ids;
}

void Reader::RemapStacks(const StackIds& stack_ids) {
  std::uint64_t unknown_stacks = 0;
  for (Event& e : trace_.events) {
    if (e.stack_id == 0) continue;
    auto sit = stack_ids.find(e.stack_id);
    if (sit == stack_ids.end()) {
      ++unknown_stacks;
      e.stack_id = 0;
    } else {
      e.stack_id = sit->second;
    }
  }
  for (FailedAllocation& f : trace_.failed_allocations) {
    auto sit = stack_ids.find(f.stack_id);
    f.stack_id = sit == stack_ids.end() ? 0 : sit->second;
  }
  if (unknown_stacks > 0) {
    trace_.warnings.push_back(absl::StrCat(name_, ": ", unknown_stacks,
                                           " events use stacks defined in damaged chunks or "
                                           "not yet written when the run was killed; "
                                           "they are shown without a stack"));
  }
}

void Reader::InternBackwardNodes(FrameTable* table) {
  std::uint64_t lost_nodes = 0;
  for (AutogradLink& l : links_) {
    if (!l.backward) continue;
    auto fit = frames_.find(l.node_frame);
    if (fit == frames_.end()) {
      ++lost_nodes;
      l.event = trace_.events.size();  // nothing to name it by: leave the event as it is
    } else {
      l.node_frame = table->Intern(fit->second);
    }
  }
  if (lost_nodes > 0) {
    trace_.warnings.push_back(absl::StrCat(name_, ": ", lost_nodes,
                                           " backward events name autograd nodes defined "
                                           "in damaged chunks; shown without their node"));
  }
}

void Reader::RebaseTimes(std::int64_t origin) {
  std::vector<Event>& events = trace_.events;
  // Times are still nanoseconds: sort on them (after the links, which index the events in
  // file order), then rebase to microseconds. Chunks are written in time order, so this
  // is usually sorted already: the check is far cheaper than stable_sort's buffer of half
  // the events.
  auto by_time = [](const auto& a, const auto& b) { return a.time_us < b.time_us; };
  if (!std::is_sorted(events.begin(), events.end(), by_time)) {
    std::stable_sort(events.begin(), events.end(), by_time);
  }
  for (Event& e : events) e.time_us = SinceOrigin(e.time_us, origin);
  for (Annotation& a : trace_.annotations) a.time_us = SinceOrigin(a.time_us, origin);
  for (CapacityChange& c : capacity_) c.time_us = SinceOrigin(c.time_us, origin);
  for (FailedAllocation& f : trace_.failed_allocations) f.time_us = SinceOrigin(f.time_us, origin);
  std::stable_sort(trace_.failed_allocations.begin(), trace_.failed_allocations.end(), by_time);
  std::stable_sort(capacity_.begin(), capacity_.end(), by_time);
  trace_.capacity_changes = std::move(capacity_);
  std::stable_sort(trace_.annotations.begin(), trace_.annotations.end(), by_time);
}

void Reader::PrependCheckpoint(const StackIds& stack_ids) {
  info_->checkpoint_events = checkpoint_.size();
  info_->checkpoint_blocks = static_cast<std::uint64_t>(
      std::count_if(checkpoint_.begin(), checkpoint_.end(),
                    [](const Event& e) { return e.action == Action::kAlloc; }));
  if (checkpoint_.empty()) return;
  std::vector<Event>& events = trace_.events;
  std::int64_t start = checkpoint_.back().time_us;  // no events: the newest block's time
  if (!events.empty()) {
    start = std::min_element(events.begin(), events.end(), [](const Event& a, const Event& b) {
              return a.time_us < b.time_us;
            })->time_us;
  }
  for (Event& e : checkpoint_) {
    e.time_us = start;
    auto sit = stack_ids.find(e.stack_id);
    e.stack_id = sit == stack_ids.end() ? 0 : sit->second;
  }
  events.insert(events.begin(), checkpoint_.begin(), checkpoint_.end());
  checkpoint_.clear();
}

}  // namespace

bool IsGpumemTrace(absl::string_view data) { return format::HasMagic(data); }

absl::StatusOr<Trace> ParseGpumemTrace(absl::string_view data, const std::string& name,
                                       GpumemFileInfo* info) {
  GpumemFileInfo local;
  Reader reader(data, name, info != nullptr ? info : &local);
  return reader.Read();
}

}  // namespace gpumem::trace
