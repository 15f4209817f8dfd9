// The gpumem trace file format, shared by the writer (profiler/) and the reader
// (tools/trace/gpumem_reader). docs/trace-format.md describes it byte by byte; keep the
// two in step. Everything is little-endian.
//
//   file   = prefix(16) chunk*
//   prefix = magic(8) "\x89GPUMEM\n", u32 version, u32 reserved (0)
//   chunk  = header(24) payload(stored_len)
//   header = u32 sync "GMCK", u32 crc32(header[8..24) + payload), u32 stored_len,
//            u32 raw_len, u8 kind, u8 codec, u16 reserved, u32 seq
//
// A journal chunk (kind 3, version 2) is a region that recording threads keep writing
// raw records into (profiler/journal_format.h): its checksum covers only the header and
// the region's own 16-byte header, which never change.
//
// A chunk decodes on its own (deltas restart in every chunk), so a reader can skip a
// corrupt chunk and resynchronise on the next "GMCK" whose checksum holds.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace gpumem::format {

inline constexpr char kMagic[8] = {'\x89', 'G', 'P', 'U', 'M', 'E', 'M', '\n'};
inline constexpr std::uint32_t kVersion = 4;
// Version 3 is version 4 without failed-allocation records; version 2 is version 3 without
// capacity records; version 1 is version 2 without journal chunks and marks: readers still
// read them all.
inline constexpr std::uint32_t kOldestReadableVersion = 1;
// A ring trace's segments (GPUMEM_TRACE_MAX): version 4 plus checkpoint chunks, which a
// version 4 reader would not know were live blocks. Other traces are still version 4.
inline constexpr std::uint32_t kRingVersion = 5;
inline constexpr std::uint32_t kNewestReadableVersion = kRingVersion;
inline constexpr std::size_t kPrefixSize = 16;
inline constexpr std::uint32_t kChunkSync = 0x4B434D47;  // bytes "GMCK"
inline constexpr std::size_t kChunkHeaderSize = 24;
// Bounds a reader enforces before allocating anything: a corrupt length must not make it
// allocate gigabytes. The writer stays far below them.
inline constexpr std::uint32_t kMaxStoredLen = 64u << 20;
inline constexpr std::uint32_t kMaxRawLen = 256u << 20;

enum class ChunkKind : std::uint8_t {
  kHeader = 0,   // key/value strings: pid, rank, host, clock origin, ...
  kRecords = 1,  // records (below)
  kEnd = 2,      // written by a clean close: totals, so a reader can tell a finished run
  kJournal = 3,  // a raw journal region, written in place by recording threads
  // Ring segments only: records (alloc events) of the blocks live when the segment began,
  // allocated in earlier segments; frames and stacks they use are defined in the segment.
  kCheckpoint = 4,
};

enum class Codec : std::uint8_t { kNone = 0, kZstd = 1 };

struct ChunkHeader {
  std::uint32_t crc = 0;
  std::uint32_t stored_len = 0;
  std::uint32_t raw_len = 0;
  ChunkKind kind = ChunkKind::kRecords;
  Codec codec = Codec::kNone;
  std::uint32_t seq = 0;
};

// Record types: the low 4 bits of a record's first byte. 0 is never a record, so a page of
// zeros (preallocated space never written) cannot be mistaken for data.
enum class RecordType : std::uint8_t {
  kAlloc = 1,         // a block handed to the program
  kFree = 2,          // a block returned by the program
  kMap = 3,           // pages mapped into a range
  kUnmap = 4,
  kOom = 5,           // an allocation failed; extra = the device's free bytes
  kStep = 6,          // a training-step boundary; size = the step number
  kSegmentAlloc = 7,  // device memory obtained outside gpumem (cudaMalloc and friends)
  kSegmentFree = 8,
  kFrame = 9,         // a frame definition
  kStack = 10,        // a stack definition
  kAnnotation = 11,   // a named mark (e.g. CUDA used in a forked child)
  kAutograd = 12,     // autograd link of the event record that follows it
  kJournalMark = 13,  // journal region r: its records before index n are in chunks
  kCapacity = 14,     // the device's memory cap from now on; extra = CapacitySource
  // A device-memory call outside gpumem's allocator failed: size = the request, addr =
  // FailedCallWord (the call and its error), extra = the driver's free bytes if known.
  // The last type the 4 bits can hold.
  kFailedAlloc = 15,
};

// The sequence number PyTorch gives a backward node that no forward op made
// (AccumulateGrad, which makes a parameter's gradient): a kAutograd link carrying it
// names no op.
inline constexpr std::uint64_t kNoAutogradSequence = ~std::uint64_t{0};
inline constexpr std::uint8_t kMaxRecordType = 15;
// Records a reader takes as events (allocations, frees, maps, OOMs, steps, memory outside
// the allocator); the others (definitions, links, marks, caps, annotations, failed calls)
// say something about them.
constexpr bool IsEventRecord(RecordType type) {
  return type >= RecordType::kAlloc && type <= RecordType::kSegmentFree;
}

// The note (an annotation, type 11) the Python package writes when the program dies of an
// uncaught out-of-memory error, followed by the error's first line: the OOM before it
// ended the run, whatever other threads did after it.
inline constexpr absl::string_view kDiedOfOomNote =
    "gpumem: the program died of an out-of-memory error";

// A step record's extra: what marked the step.
enum class StepSource : std::uint8_t {
  kUnknown = 0,
  kExplicit = 1,
  kOptimizerHook = 2,
  kBackward = 3,
  kModelCall = 4,
  kGraphReplay = 5,
  // Calls of the model with grad, in train mode, before any backward pass: each may be a
  // part of the first iteration whose graphs wait for its backward (an episode, a sum of
  // micro-batches' losses), not a step of its own.
  kModelCallAwaitingBackward = 6,
};
inline constexpr auto kLastStepSource = StepSource::kModelCallAwaitingBackward;
// What each StepSource is called in reports and warnings, by its value.
inline constexpr std::array<absl::string_view, 7> kStepSourceNames = {
    "",           "gpumem.step()", "optimizer step hooks", "backward passes",
    "model calls", "graph replays", "model calls awaiting the first backward pass"};
// A capacity record's extra: where the cap came from.
enum class CapacitySource : std::uint8_t {
  kUnknown = 0,
  kDeviceTotal = 1,
  kEnvironment = 2,     // GPUMEM_CAPACITY
  kMemoryFraction = 3,  // torch.cuda.set_per_process_memory_fraction
  kSetCapacity = 4,     // gpumem_set_capacity
};
inline constexpr std::uint8_t kMaxCapacitySource = 4;

// The memory call a failed-allocation record names: the device-memory calls the CUPTI
// tracer decodes (profiler/cupti/memory_call.cc). Values are stored: append only.
enum class MemoryApi : std::uint8_t {
  kUnknown = 0,
  kCuMemAlloc = 1,
  kCuMemAllocPitch = 2,
  kCuMemAllocManaged = 3,
  kCuMemCreate = 4,
  kCuMemAllocAsync = 5,
  kCuMemAllocFromPoolAsync = 6,
  kCudaMalloc = 7,
  kCudaMallocPitch = 8,
  kCudaMallocManaged = 9,
  kCudaMallocAsync = 10,
  kCudaMallocFromPoolAsync = 11,
};
inline constexpr std::uint8_t kMaxMemoryApi = 11;
// "cuMemAlloc", "cudaMalloc", ...; "unknown" for any value not in the enum.
const char* MemoryApiName(std::uint64_t api);
// The call of a decoded name ("cuMemAlloc_v2", "cudaMallocAsync_ptsz"): kUnknown if none.
MemoryApi MemoryApiOf(absl::string_view name);
// A runtime (cuda*) call: its error is a cudaError_t, else a CUresult.
inline bool IsRuntimeApi(MemoryApi api) { return api >= MemoryApi::kCudaMalloc; }
// A failed-allocation record's addr: the error code in the low 32 bits, the call above.
inline std::uint64_t FailedCallWord(MemoryApi api, std::uint32_t error) {
  return (std::uint64_t{static_cast<std::uint8_t>(api)} << 32) | error;
}
inline std::uint32_t FailedCallError(std::uint64_t word) {
  return static_cast<std::uint32_t>(word);
}
inline std::uint64_t FailedCallApi(std::uint64_t word) { return word >> 32; }

// Flags: the high 4 bits of an event record's first byte. "Same as the previous event of
// this chunk" flags let the common case cost one byte per field.
inline constexpr std::uint8_t kFlagSameThread = 0x10;
inline constexpr std::uint8_t kFlagSameDeviceStream = 0x20;
inline constexpr std::uint8_t kFlagSameStack = 0x40;
inline constexpr std::uint8_t kFlagExtra = 0x80;       // an extra varint follows
inline constexpr std::uint8_t kFlagAnnotationStart = 0x10;

enum class FrameKind : std::uint8_t { kNative = 1, kPython = 2, kApi = 3 };

// --- byte helpers

inline void PutU32(std::string* out, std::uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 4);
}
inline std::uint32_t GetU32(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}

inline void PutVarint(std::string* out, std::uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
inline std::uint64_t ZigZag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
inline std::int64_t UnZigZag(std::uint64_t v) {
  return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}
inline void PutString(std::string* out, absl::string_view s) {
  PutVarint(out, s.size());
  out->append(s.data(), s.size());
}

// Reads from a payload; every Get fails (returns false) instead of reading past the end.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }
  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }
  bool GetByte(std::uint8_t* v) {
    if (pos_ >= data_.size()) return false;
    *v = static_cast<std::uint8_t>(data_[pos_++]);
    return true;
  }
  bool GetVarint(std::uint64_t* v) {
    std::uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      std::uint8_t b;
      if (!GetByte(&b)) return false;
      result |= std::uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;  // more than 10 bytes: not a varint
  }
  bool GetString(std::string* s) {
    std::uint64_t n;
    if (!GetVarint(&n) || n > data_.size() - pos_) return false;
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }

 private:
  absl::string_view data_;
  std::size_t pos_ = 0;
};

// --- chunks

std::uint32_t Crc32(std::uint32_t crc, const void* data, std::size_t n);

// The 16-byte file prefix.
std::string FilePrefix(std::uint32_t version = kVersion);
// Segment `k` of a ring trace whose file name is `base` ("run.gpumem" -> "run.seg7.gpumem";
// a name without the .gpumem suffix gets ".seg7" appended). Names only, no folder.
std::string RingSegmentName(const std::string& base, std::uint64_t k);
// The ring's name for a segment's name (RingSegmentName undone: "out/run.seg7.gpumem" ->
// "out/run.gpumem"); empty for a name that is no segment of a .gpumem ring.
std::string RingNameOfSegment(const std::string& path);
// True if `data` starts with the gpumem magic (the version is checked by the reader).
bool HasMagic(absl::string_view data);

// Bytes of a chunk's payload that its checksum covers: all of it, but only the region's
// fixed header for a journal chunk.
std::uint32_t CheckedPayloadBytes(ChunkKind kind, std::uint32_t stored_len);

// Appends header + payload, compressing the payload with zstd when that makes it smaller.
void AppendChunk(std::string* out, ChunkKind kind, std::uint32_t seq,
                 absl::string_view raw_payload, int zstd_level = 1);

// Parses and checks the header at `data` (which holds at least kChunkHeaderSize bytes);
// nullopt when the sync word or the bounds are wrong. The checksum is checked separately
// once the payload is known to be in the file.
std::optional<ChunkHeader> ParseChunkHeader(const unsigned char* data);
// Appends the header of a journal chunk, the region's own header and `lead` zeros; the
// caller appends `capacity` x 64 zero bytes (the records) after them.
void AppendJournalChunkHead(std::string* out, std::uint32_t seq, std::uint32_t region,
                            std::uint32_t capacity, std::uint32_t lead);
// The journal header's fields; nullopt if they disagree with the chunk's length.
struct JournalHeader {
  std::uint32_t region = 0;
  std::uint32_t capacity = 0;
  std::uint32_t lead = 0;
};
std::optional<JournalHeader> ParseJournalHeader(const unsigned char* payload,
                                                std::uint32_t stored_len);
bool ChunkChecksumOk(const unsigned char* chunk, const ChunkHeader& header);

// The chunk's payload, decompressed; nullopt if it does not decode to raw_len bytes.
std::optional<std::string> DecodePayload(const unsigned char* payload,
                                         const ChunkHeader& header);

}  // namespace gpumem::format
