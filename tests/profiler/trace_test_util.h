// Helpers shared by the profiler tests: temporary files and a chunk walker that relies
// only on the documented chunk header, not on the reader under test.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "profiler/trace_format.h"

namespace gpumem::testing {

// In the system's temporary folder (TMPDIR where set), named by this process.
inline std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("gpumem_" + std::to_string(getpid()) + "_" + name))
      .string();
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct ChunkSpan {
  std::size_t offset;
  std::size_t size;  // header + payload
  format::ChunkKind kind;
};

// The chunks of a well-formed file, in order, from their headers alone.
inline std::vector<ChunkSpan> WalkChunks(const std::string& bytes) {
  std::vector<ChunkSpan> spans;
  std::size_t pos = format::kPrefixSize;
  while (pos + format::kChunkHeaderSize <= bytes.size()) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + pos;
    if (format::GetU32(p) != format::kChunkSync) break;
    const std::size_t size = format::kChunkHeaderSize + format::GetU32(p + 8);
    spans.push_back({pos, size, static_cast<format::ChunkKind>(p[16])});
    pos += size;
  }
  return spans;
}

// Zeroes the record slots of every journal chunk (kind 3), as if every record had been
// compressed long ago and its slot never written again: what is left to read is in the
// records chunks alone.
inline void WipeJournals(std::string* bytes) {
  for (const ChunkSpan& span : WalkChunks(*bytes)) {
    if (span.kind != format::ChunkKind::kJournal) continue;
    const std::size_t records = format::kChunkHeaderSize + 16 +
                                format::GetU32(reinterpret_cast<const unsigned char*>(
                                                   bytes->data()) + span.offset + 24 + 12);
    bytes->replace(span.offset + records, span.size - records, span.size - records, '\0');
  }
}

// The chunks other than journal regions.
inline std::vector<ChunkSpan> WalkDataChunks(const std::string& bytes) {
  std::vector<ChunkSpan> spans;
  for (const ChunkSpan& span : WalkChunks(bytes)) {
    if (span.kind != format::ChunkKind::kJournal) spans.push_back(span);
  }
  return spans;
}

}  // namespace gpumem::testing
