// One raw journal region of the trace file (profiler/journal_format.h), mapped on its
// own so that its address never moves when the writer remaps the growing file. Both
// mappings are MAP_SHARED views of the same page-cache pages: what a recording thread
// stores here is in the file the moment the store retires, with no system call, and a
// SIGKILL cannot take it back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "profiler/journal_format.h"

namespace gpumem {

class JournalRegion {
 public:
  // Maps `capacity` records that start at file offset `records_offset` of `fd`.
  static absl::StatusOr<std::unique_ptr<JournalRegion>> Map(int fd, std::size_t records_offset,
                                                           std::uint32_t id,
                                                           std::uint32_t capacity);
  ~JournalRegion();
  JournalRegion(const JournalRegion&) = delete;
  JournalRegion& operator=(const JournalRegion&) = delete;

  // After a clean close, when every record is in the chunks: frees the region's disk
  // blocks (it reads as zeros; the file keeps its length). Best effort.
  void Release(int fd) const;

  std::uint32_t id() const { return id_; }
  std::uint32_t capacity() const { return capacity_; }
  format::JournalRecord* slot(std::uint64_t index) const {
    return records_ + (index % capacity_);
  }

 private:
  JournalRegion(void* map, std::size_t map_len, format::JournalRecord* records,
                std::size_t records_offset, std::uint32_t id, std::uint32_t capacity)
      : map_(map),
        map_len_(map_len),
        records_(records),
        records_offset_(records_offset),
        id_(id),
        capacity_(capacity) {}

  void* map_;
  std::size_t map_len_;
  format::JournalRecord* records_;
  std::size_t records_offset_;
  std::uint32_t id_;
  std::uint32_t capacity_;
};

}  // namespace gpumem
