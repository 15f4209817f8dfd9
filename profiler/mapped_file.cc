#include "profiler/mapped_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumem {
namespace {

absl::Status Errno(const std::string& path, const char* what, int err) {
  return absl::UnavailableError(absl::StrCat(path, ": ", what, ": ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<MappedFile> MappedFile::Create(const std::string& path,
                                              std::size_t initial_capacity,
                                              std::size_t max_growth) {
  MappedFile file;
  file.path_ = path;
  file.max_growth_ = std::max<std::size_t>(max_growth, 4096);
  // Not truncated until locked: the file may be another live process's trace, mapped
  // there, where a truncation would make its next record a SIGBUS.
  file.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (file.fd_ < 0) return Errno(path, "cannot create", errno);
  // Held until the descriptor closes (a kill -9 included). File systems without flock
  // (ENOLCK, EOPNOTSUPP on some network and FUSE mounts) go unlocked, as before.
  if (::flock(file.fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    file.Abandon();  // closed untouched: Finish() would trim the other writer's file
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": being written by another process"));
  }
  if (::ftruncate(file.fd_, 0) != 0) return Errno(path, "cannot truncate", errno);
  absl::Status grown = file.Grow(std::max<std::size_t>(initial_capacity, 4096));
  if (!grown.ok()) return grown;
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    map_ = std::exchange(other.map_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    size_ = std::exchange(other.size_, 0);
    max_growth_ = other.max_growth_;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (fd_ >= 0) (void)Finish();
}

void MappedFile::Unmap() {
  if (map_ != nullptr) ::munmap(map_, capacity_);
  map_ = nullptr;
}

void MappedFile::Abandon() {
  Unmap();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status MappedFile::Grow(std::size_t needed) {
  std::size_t capacity = std::max<std::size_t>(capacity_, 4096);
  // Double while small, then grow max_growth (256 MiB) at a time: few remaps, bounded waste.
  while (capacity < needed) capacity += std::min<std::size_t>(capacity, max_growth_);
  int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(capacity));
  constexpr std::size_t kStep = 1 << 20;
  if (err == ENOSPC && capacity > (needed + kStep - 1) / kStep * kStep) {
    // A nearly full disk: reserve only the next MiB, so the trace stops within a MiB of
    // where the disk filled rather than up to 256 MiB before.
    capacity = (needed + kStep - 1) / kStep * kStep;
    err = ::posix_fallocate(fd_, 0, static_cast<off_t>(capacity));
  }
  if (err != 0) return Errno(path_, "cannot reserve space", err);
  Unmap();
  void* map = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) return Errno(path_, "cannot map", errno);
  map_ = static_cast<char*>(map);
  capacity_ = capacity;
  return absl::OkStatus();
}

absl::Status MappedFile::Append(const void* data, std::size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  if (size_ + n > capacity_) {
    absl::Status grown = Grow(size_ + n);
    if (!grown.ok()) return grown;
  }
  std::memcpy(map_ + size_, data, n);
  size_ += n;
  return absl::OkStatus();
}

absl::StatusOr<std::size_t> MappedFile::AppendZeros(std::size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  if (size_ + n > capacity_) {
    absl::Status grown = Grow(size_ + n);
    if (!grown.ok()) return grown;
  }
  const std::size_t at = size_;
  size_ += n;
  return at;
}

absl::Status MappedFile::Finish() {
  if (fd_ < 0) return absl::OkStatus();
  Unmap();
  absl::Status status;
  if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
    status = Errno(path_, "cannot truncate", errno);
  }
  // Journal regions mapped on their own keep the open file (and so its lock) alive until
  // their threads let go: the name is released with the finished file.
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
  return status;
}

}  // namespace gpumem
