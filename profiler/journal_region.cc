#include "profiler/journal_region.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpumem {

absl::StatusOr<std::unique_ptr<JournalRegion>> JournalRegion::Map(int fd,
                                                                 std::size_t records_offset,
                                                                 std::uint32_t id,
                                                                 std::uint32_t capacity) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t start = records_offset / page * page;
  const std::size_t len = records_offset - start + std::size_t{capacity} *
                                                       format::kJournalRecordBytes;
  void* map = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                     static_cast<off_t>(start));
  if (map == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("cannot map a trace journal region: ", std::strerror(errno)));
  }
  char* records = static_cast<char*>(map) + (records_offset - start);
  // The writer places records at a file offset that is a multiple of 64 (the journal
  // header's lead), so each record is one aligned cache line here.
  return std::unique_ptr<JournalRegion>(new JournalRegion(
      map, len, reinterpret_cast<format::JournalRecord*>(records), records_offset, id,
      capacity));
}

void JournalRegion::Release(int fd) const {
  (void)::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(records_offset_),
                    static_cast<off_t>(std::size_t{capacity_} * format::kJournalRecordBytes));
}

JournalRegion::~JournalRegion() { ::munmap(map_, map_len_); }

}  // namespace gpumem
