// PyTorch's ExpandableSegment (expandable_segments:True): one large virtual range whose
// pages of `page_size` bytes (2 MiB in the small pool, 20 MiB in the large one) are
// created and mapped on demand, and unmapped when cached memory is released.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/backend.h"

namespace gpumem::emulation {

struct SegmentRange {
  DevicePtr ptr = 0;
  std::size_t size = 0;
};

class ExpandableSegment {
 public:
  // Reserves `va_bytes` (rounded up to pages) of address space.
  static absl::StatusOr<std::unique_ptr<ExpandableSegment>> Create(Backend& backend,
                                                                   StreamId stream,
                                                                   std::size_t va_bytes,
                                                                   std::size_t page_size);
  ~ExpandableSegment();
  ExpandableSegment(const ExpandableSegment&) = delete;
  ExpandableSegment& operator=(const ExpandableSegment&) = delete;

  // Maps every page that [range.ptr, range.ptr + range.size) touches; range.ptr must be
  // page aligned. Returns the range mapped, or size 0 if the device is out of memory
  // (then nothing stays mapped).
  SegmentRange Map(SegmentRange range);
  // Unmaps and releases the pages lying wholly inside `range`; returns what it unmapped
  // (size 0 if no whole page).
  SegmentRange Unmap(SegmentRange range);

  DevicePtr ptr() const { return base_; }
  std::size_t size() const { return max_pages_ * page_size_; }
  std::size_t page_size() const { return page_size_; }
  StreamId stream() const { return stream_; }

 private:
  ExpandableSegment(Backend& backend, StreamId stream, DevicePtr base, std::size_t page_size,
                    std::size_t max_pages)
      : backend_(backend), stream_(stream), base_(base), page_size_(page_size),
        max_pages_(max_pages) {}
  void UnmapPages(std::size_t begin, std::size_t end);
  SegmentRange PagesRange(std::size_t begin, std::size_t end) const {
    return {base_ + begin * page_size_, (end - begin) * page_size_};
  }

  Backend& backend_;
  StreamId stream_;
  DevicePtr base_;
  std::size_t page_size_;
  std::size_t max_pages_;
  std::vector<PhysicalHandle> pages_;  // index -> handle; 0 where nothing is mapped
};

}  // namespace gpumem::emulation
