#include "allocator/emulation/expandable_segment.h"

#include <cstdio>
#include <cstdlib>

namespace gpumem::emulation {

absl::StatusOr<std::unique_ptr<ExpandableSegment>> ExpandableSegment::Create(
    Backend& backend, StreamId stream, std::size_t va_bytes, std::size_t page_size) {
  const std::size_t pages = (va_bytes + page_size - 1) / page_size;
  absl::StatusOr<DevicePtr> base = backend.ReserveAddressRange(pages * page_size);
  if (!base.ok()) return base.status();
  return std::unique_ptr<ExpandableSegment>(
      new ExpandableSegment(backend, stream, *base, page_size, pages));
}

ExpandableSegment::~ExpandableSegment() {
  UnmapPages(0, pages_.size());
  backend_.ReleaseAddressRange(base_, size());
}

SegmentRange ExpandableSegment::Map(SegmentRange range) {
  const std::size_t begin = (range.ptr - base_) / page_size_;
  const std::size_t end = (range.ptr + range.size - base_ + page_size_ - 1) / page_size_;
  if (begin == end || end > max_pages_) return PagesRange(begin, begin);
  if (pages_.size() < end) pages_.resize(end, 0);
  for (std::size_t i = begin; i < end; ++i) {
    if (pages_[i] != 0) {
      std::fprintf(stderr, "ExpandableSegment: page %zu mapped twice\n", i);
      std::abort();
    }
    absl::StatusOr<PhysicalHandle> handle = backend_.CreatePhysical(page_size_);
    if (!handle.ok()) {
      // Out of memory: give back what this call created, as PyTorch does.
      for (std::size_t j = begin; j < i; ++j) {
        backend_.ReleasePhysical(pages_[j]);
        pages_[j] = 0;
      }
      while (!pages_.empty() && pages_.back() == 0) pages_.pop_back();
      return PagesRange(begin, begin);
    }
    pages_[i] = *handle;
  }
  for (std::size_t i = begin; i < end; ++i) {
    absl::Status mapped = backend_.Map(base_ + i * page_size_, page_size_, pages_[i], 0);
    if (!mapped.ok()) {
      std::fprintf(stderr, "ExpandableSegment: map failed: %s\n",
                   std::string(mapped.message()).c_str());
      std::abort();
    }
  }
  return PagesRange(begin, end);
}

SegmentRange ExpandableSegment::Unmap(SegmentRange range) {
  const std::size_t begin = (range.ptr - base_ + page_size_ - 1) / page_size_;
  const std::size_t end = (range.ptr + range.size - base_) / page_size_;
  if (begin >= end) return {range.ptr, 0};
  UnmapPages(begin, end);
  return PagesRange(begin, end);
}

void ExpandableSegment::UnmapPages(std::size_t begin, std::size_t end) {
  // cuMemUnmap does not wait for queued work: PyTorch synchronizes first.
  backend_.Synchronize();
  for (std::size_t i = begin; i < end && i < pages_.size(); ++i) {
    if (pages_[i] == 0) continue;
    // As with a failed map: the emulation has no way back, and PyTorch's aborts too.
    if (absl::Status s = backend_.Unmap(base_ + i * page_size_, page_size_); !s.ok()) {
      std::fprintf(stderr, "ExpandableSegment: unmap failed: %s\n",
                   std::string(s.message()).c_str());
      std::abort();
    }
    backend_.ReleasePhysical(pages_[i]);
    pages_[i] = 0;
  }
  while (!pages_.empty() && pages_.back() == 0) pages_.pop_back();
}

}  // namespace gpumem::emulation
