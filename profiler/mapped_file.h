// An append-only file written through a shared memory mapping. Bytes copied into the
// mapping belong to the kernel's page cache at once, so they survive the process being
// killed (SIGKILL, OOM killer) without any write() or msync(). Space is reserved ahead
// with posix_fallocate so a full disk shows up as an error here, not as SIGBUS later.
// Only one thread at a time may use an instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpumem {

class MappedFile {
 public:
  // Creates or truncates `path` and holds an exclusive flock on it while open.
  // FailedPrecondition when another open file (another process's trace) holds it.
  // `max_growth`: the most space reserved ahead at once (a ring trace's segments keep it
  // small, since reserved space is on the disk and counts against the ring's bound).
  static absl::StatusOr<MappedFile> Create(const std::string& path,
                                           std::size_t initial_capacity = 1 << 20,
                                           std::size_t max_growth = std::size_t{256} << 20);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  absl::Status Append(const void* data, std::size_t n);
  // Appends n zero bytes (space posix_fallocate already zeroed) and returns where they
  // start: room that others write in place (journal regions, mapped on their own).
  absl::StatusOr<std::size_t> AppendZeros(std::size_t n);
  // Cuts the preallocated tail off and closes the file.
  absl::Status Finish();
  // Unmaps without truncating or touching the file: for a forked child, whose parent
  // still owns the file.
  void Abandon();

  std::size_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  absl::Status Grow(std::size_t needed);
  void Unmap();

  std::string path_;
  int fd_ = -1;
  char* map_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t size_ = 0;
  std::size_t max_growth_ = std::size_t{256} << 20;
};

}  // namespace gpumem
