// What a ring trace (GPUMEM_TRACE_MAX) takes on disk, for the tests that hold it to its
// bound: its segment files' lengths and allocated blocks, links left out.
#pragma once

#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "profiler/trace_format.h"

namespace gpumem::testing {

struct DiskUse {
  std::uint64_t length = 0;
  std::uint64_t allocated = 0;
};

// The segments of the ring named `path` (NAME.gpumem: NAME.segK.gpumem).
inline DiskUse RingDiskUse(const std::string& path) {
  const std::string folder = path.substr(0, path.rfind('/') + 1);
  const std::string stem = path.substr(folder.size(), path.size() - folder.size() - 7) + ".seg";
  DiskUse use;
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return use;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    struct stat st;
    if (name.rfind(stem, 0) != 0 || lstat((folder + name).c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode)) continue;
    use.length += static_cast<std::uint64_t>(st.st_size);
    use.allocated += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  closedir(dir);
  return use;
}

// The larger of each figure.
inline DiskUse Most(const DiskUse& a, const DiskUse& b) {
  return {a.length > b.length ? a.length : b.length,
          a.allocated > b.allocated ? a.allocated : b.allocated};
}

inline void RemoveRing(const std::string& path) {
  std::remove(path.c_str());
  const std::string folder = path.substr(0, path.rfind('/') + 1);
  const std::string base = path.substr(folder.size());
  for (std::uint64_t k = 0; k < 1000; ++k) {
    std::remove((folder + format::RingSegmentName(base, k)).c_str());
  }
}

}  // namespace gpumem::testing
