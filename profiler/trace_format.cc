#include "profiler/trace_format.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <string_view>

#include "profiler/journal_format.h"

namespace gpumem::format {

std::uint32_t Crc32(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  // zlib's crc32 takes a uInt length: feed it in pieces so 64-bit sizes are safe.
  while (n > 0) {
    uInt piece = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = static_cast<std::uint32_t>(crc32(crc, p, piece));
    p += piece;
    n -= piece;
  }
  return crc;
}

std::string FilePrefix(std::uint32_t version) {
  std::string out(kMagic, sizeof(kMagic));
  PutU32(&out, version);
  PutU32(&out, 0);
  return out;
}

namespace {
constexpr std::string_view kTraceSuffix = ".gpumem";
constexpr std::string_view kSegmentTag = ".seg";
}  // namespace

std::string RingSegmentName(const std::string& base, std::uint64_t k) {
  const std::string seg = std::string(kSegmentTag) + std::to_string(k);
  if (base.size() > kTraceSuffix.size() && base.ends_with(kTraceSuffix)) {
    return base.substr(0, base.size() - kTraceSuffix.size()) + seg + std::string(kTraceSuffix);
  }
  return base + seg;
}

std::string RingNameOfSegment(const std::string& path) {
  if (!path.ends_with(kTraceSuffix)) return "";
  const std::string_view stem(path.data(), path.size() - kTraceSuffix.size());
  const std::size_t tag = stem.rfind(kSegmentTag);
  if (tag == std::string_view::npos) return "";
  const std::string_view digits = stem.substr(tag + kSegmentTag.size());
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "";
  }
  return std::string(stem.substr(0, tag)) + std::string(kTraceSuffix);
}

namespace {

constexpr const char* kMemoryApiNames[] = {
    "unknown",           "cuMemAlloc",      "cuMemAllocPitch",         "cuMemAllocManaged",
    "cuMemCreate",       "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cudaMalloc",
    "cudaMallocPitch",   "cudaMallocManaged", "cudaMallocAsync",       "cudaMallocFromPoolAsync",
};
static_assert(sizeof(kMemoryApiNames) / sizeof(kMemoryApiNames[0]) == kMaxMemoryApi + 1);

}  // namespace

const char* MemoryApiName(std::uint64_t api) {
  return kMemoryApiNames[api <= kMaxMemoryApi ? api : 0];
}

MemoryApi MemoryApiOf(absl::string_view name) {
  // Decoded names may carry a version or stream suffix ("_v2", "_ptsz"); the underscore
  // keeps "cuMemAllocPitch_v2" from being taken for cuMemAlloc.
  for (std::uint8_t i = 1; i <= kMaxMemoryApi; ++i) {
    const absl::string_view n = kMemoryApiNames[i];
    if (name.substr(0, n.size()) == n && (name.size() == n.size() || name[n.size()] == '_')) {
      return static_cast<MemoryApi>(i);
    }
  }
  return MemoryApi::kUnknown;
}

bool HasMagic(absl::string_view data) {
  return data.size() >= sizeof(kMagic) && std::memcmp(data.data(), kMagic, sizeof(kMagic)) == 0;
}

std::uint32_t CheckedPayloadBytes(ChunkKind kind, std::uint32_t stored_len) {
  return kind == ChunkKind::kJournal ? static_cast<std::uint32_t>(kJournalHeaderBytes)
                                     : stored_len;
}

namespace {

std::string ChunkHeaderBytes(ChunkKind kind, Codec codec, std::uint32_t seq,
                             std::uint32_t stored_len, std::uint32_t raw_len,
                             absl::string_view checked_payload) {
  std::string header;
  PutU32(&header, kChunkSync);
  PutU32(&header, 0);  // crc, filled below
  PutU32(&header, stored_len);
  PutU32(&header, raw_len);
  header.push_back(static_cast<char>(kind));
  header.push_back(static_cast<char>(codec));
  header.push_back(0);
  header.push_back(0);
  PutU32(&header, seq);
  std::uint32_t crc = Crc32(0, header.data() + 8, kChunkHeaderSize - 8);
  crc = Crc32(crc, checked_payload.data(), checked_payload.size());
  std::string crc_bytes;
  PutU32(&crc_bytes, crc);
  header.replace(4, 4, crc_bytes);
  return header;
}

}  // namespace

void AppendJournalChunkHead(std::string* out, std::uint32_t seq, std::uint32_t region,
                            std::uint32_t capacity, std::uint32_t lead) {
  std::string journal_header;
  PutU32(&journal_header, region);
  PutU32(&journal_header, static_cast<std::uint32_t>(kJournalRecordBytes));
  PutU32(&journal_header, capacity);
  PutU32(&journal_header, lead);
  const auto len = static_cast<std::uint32_t>(kJournalHeaderBytes + lead +
                                              std::size_t{capacity} * kJournalRecordBytes);
  out->append(ChunkHeaderBytes(ChunkKind::kJournal, Codec::kNone, seq, len, len,
                               journal_header));
  out->append(journal_header);
  out->append(lead, '\0');
}

std::optional<JournalHeader> ParseJournalHeader(const unsigned char* payload,
                                                std::uint32_t stored_len) {
  JournalHeader h;
  h.region = GetU32(payload);
  h.capacity = GetU32(payload + 8);
  h.lead = GetU32(payload + 12);
  if (GetU32(payload + 4) != kJournalRecordBytes || h.lead >= kJournalRecordBytes ||
      h.capacity == 0 || h.capacity > kMaxJournalRecords ||
      std::uint64_t{stored_len} != kJournalHeaderBytes + h.lead +
                                       std::uint64_t{h.capacity} * kJournalRecordBytes) {
    return std::nullopt;
  }
  return h;
}

void AppendChunk(std::string* out, ChunkKind kind, std::uint32_t seq,
                 absl::string_view raw_payload, int zstd_level) {
  std::string compressed;
  Codec codec = Codec::kNone;
  if (raw_payload.size() >= 64) {
    compressed.resize(ZSTD_compressBound(raw_payload.size()));
    std::size_t n = ZSTD_compress(compressed.data(), compressed.size(), raw_payload.data(),
                                  raw_payload.size(), zstd_level);
    if (!ZSTD_isError(n) && n < raw_payload.size()) {
      compressed.resize(n);
      codec = Codec::kZstd;
    }
  }
  absl::string_view stored = codec == Codec::kZstd ? absl::string_view(compressed) : raw_payload;
  out->append(ChunkHeaderBytes(kind, codec, seq, static_cast<std::uint32_t>(stored.size()),
                               static_cast<std::uint32_t>(raw_payload.size()), stored));
  out->append(stored.data(), stored.size());
}

std::optional<ChunkHeader> ParseChunkHeader(const unsigned char* data) {
  if (GetU32(data) != kChunkSync) return std::nullopt;
  ChunkHeader h;
  h.crc = GetU32(data + 4);
  h.stored_len = GetU32(data + 8);
  h.raw_len = GetU32(data + 12);
  std::uint8_t kind = data[16];
  std::uint8_t codec = data[17];
  h.seq = GetU32(data + 20);
  if (kind > static_cast<std::uint8_t>(ChunkKind::kCheckpoint)) return std::nullopt;
  if (codec > static_cast<std::uint8_t>(Codec::kZstd)) return std::nullopt;
  if (data[18] != 0 || data[19] != 0) return std::nullopt;
  h.kind = static_cast<ChunkKind>(kind);
  h.codec = static_cast<Codec>(codec);
  if (h.stored_len > kMaxStoredLen || h.raw_len > kMaxRawLen) return std::nullopt;
  if (h.codec == Codec::kNone && h.stored_len != h.raw_len) return std::nullopt;
  if (h.kind == ChunkKind::kJournal &&
      (h.codec != Codec::kNone || h.stored_len < kJournalHeaderBytes)) {
    return std::nullopt;
  }
  return h;
}

bool ChunkChecksumOk(const unsigned char* chunk, const ChunkHeader& header) {
  std::uint32_t crc = Crc32(0, chunk + 8, kChunkHeaderSize - 8);
  crc = Crc32(crc, chunk + kChunkHeaderSize,
              CheckedPayloadBytes(header.kind, header.stored_len));
  return crc == header.crc;
}

std::optional<std::string> DecodePayload(const unsigned char* payload,
                                         const ChunkHeader& header) {
  if (header.codec == Codec::kNone) {
    return std::string(reinterpret_cast<const char*>(payload), header.stored_len);
  }
  unsigned long long expected = ZSTD_getFrameContentSize(payload, header.stored_len);
  if (expected != header.raw_len) return std::nullopt;
  std::string out(header.raw_len, '\0');
  std::size_t n = ZSTD_decompress(out.data(), out.size(), payload, header.stored_len);
  if (ZSTD_isError(n) || n != header.raw_len) return std::nullopt;
  return out;
}

}  // namespace gpumem::format
