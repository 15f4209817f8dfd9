// Helpers shared by the profiler tests: temporary files and a chunk walker that relies
// only on the documented chunk header, not on the reader under test.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "profiler/trace_format.h"

namespace gpumem::testing {

inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/gpumem_" + std::to_string(getpid()) +
         "_" + name;
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

}  // namespace gpumem::testing
