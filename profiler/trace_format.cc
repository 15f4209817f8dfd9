#include "profiler/trace_format.h"

#include <zlib.h>
#include <zstd.h>

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

std::string FilePrefix() {
  std::string out(kMagic, sizeof(kMagic));
  PutU32(&out, kVersion);
  PutU32(&out, 0);
  return out;
}

bool HasMagic(absl::string_view data) {
  return data.size() >= sizeof(kMagic) && std::memcmp(data.data(), kMagic, sizeof(kMagic)) == 0;
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
  std::string header;
  PutU32(&header, kChunkSync);
  PutU32(&header, 0);  // crc, filled below
  PutU32(&header, static_cast<std::uint32_t>(stored.size()));
  PutU32(&header, static_cast<std::uint32_t>(raw_payload.size()));
  header.push_back(static_cast<char>(kind));
  header.push_back(static_cast<char>(codec));
  header.push_back(0);
  header.push_back(0);
  PutU32(&header, seq);
  std::uint32_t crc = Crc32(0, header.data() + 8, kChunkHeaderSize - 8);
  crc = Crc32(crc, stored.data(), stored.size());
  std::string crc_bytes;
  PutU32(&crc_bytes, crc);
  header.replace(4, 4, crc_bytes);
  out->append(header);
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
  if (kind > static_cast<std::uint8_t>(ChunkKind::kEnd)) return std::nullopt;
  if (codec > static_cast<std::uint8_t>(Codec::kZstd)) return std::nullopt;
  if (data[18] != 0 || data[19] != 0) return std::nullopt;
  h.kind = static_cast<ChunkKind>(kind);
  h.codec = static_cast<Codec>(codec);
  if (h.stored_len > kMaxStoredLen || h.raw_len > kMaxRawLen) return std::nullopt;
  if (h.codec == Codec::kNone && h.stored_len != h.raw_len) return std::nullopt;
  return h;
}

bool ChunkChecksumOk(const unsigned char* chunk, const ChunkHeader& header) {
  std::uint32_t crc = Crc32(0, chunk + 8, kChunkHeaderSize - 8);
  crc = Crc32(crc, chunk + kChunkHeaderSize, header.stored_len);
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
