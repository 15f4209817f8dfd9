#include "allocator/page_heap.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "allocator/size_classes.h"

namespace gpumem {

PageHeap::PageHeap(Backend& backend, int device, AllocatorObserver* observer,
                   std::size_t page_bytes)
    : backend_(backend),
      device_(device),
      observer_(observer),
      page_(std::max(backend.granularity(), RoundUp(page_bytes, backend.granularity()))),
      vmm_(backend.supports_vmm()) {}

PageHeap::~PageHeap() {
  // The allocator unmaps and frees everything before destroying the heap; whatever is
  // left (a caller leaked blocks, or the device refused an unmap) is still returned so
  // the device is clean.
  if (!mapped_.empty()) {
    Quiesce();
    std::vector<DevicePtr> vas;
    vas.reserve(mapped_.size());
    for (const auto& [va, handle] : mapped_) vas.push_back(va);
    for (DevicePtr va : vas) UnmapPage(va);
  }
  ReleaseCached();
}

void PageHeap::Notify(AllocatorEventKind kind, DevicePtr ptr, std::size_t bytes) {
  if (observer_ != nullptr) observer_->OnEvent({kind, device_, ptr, bytes, kDefaultStream});
}

// Pages are whole multiples of the device's granularity, and ranges start on a page
// (the pools find whole pages by address): the backend aligns to its granularity only,
// so a range larger by a page less a granule is reserved and its aligned part used.
absl::StatusOr<DevicePtr> PageHeap::ReserveRange(std::size_t bytes) {
  const std::size_t slack = page_ - backend_.granularity();
  absl::StatusOr<DevicePtr> base = backend_.ReserveAddressRange(bytes + slack);
  if (!base.ok()) return base;
  ++ranges_created_;
  if (slack == 0) return base;
  const DevicePtr aligned = RoundUp(*base, page_);
  reserved_bases_.emplace(aligned, *base);
  return aligned;
}

void PageHeap::ReleaseRange(DevicePtr base, std::size_t bytes) {
  const std::size_t slack = page_ - backend_.granularity();
  if (auto it = reserved_bases_.find(base); it != reserved_bases_.end()) {
    base = it->second;
    reserved_bases_.erase(it);
  }
  backend_.ReleaseAddressRange(base, bytes + slack);
  ++ranges_released_;
}

absl::StatusOr<std::size_t> PageHeap::CachePages(std::size_t n) {
  const std::size_t missing = n > cached_.size() ? n - cached_.size() : 0;
  for (std::size_t i = 0; i < missing; ++i) {
    absl::StatusOr<PhysicalHandle> h = backend_.CreatePhysical(page_);
    if (!h.ok()) {
      // A request that cannot be served leaves the device as it found it.
      for (std::size_t j = 0; j < i; ++j) {
        ReleasePhysical(cached_.back());
        cached_.pop_back();
      }
      return h.status();
    }
    reserved_ += page_;
    created_bytes_ += page_;
    cached_.push_back(*h);
  }
  return missing;
}

absl::Status PageHeap::MapPages(DevicePtr va, std::size_t n) {
  absl::StatusOr<std::size_t> created = CachePages(n);
  if (!created.ok()) return created.status();
  // The most recently cached pages first: pages lent by the caller's stitch are among them.
  std::vector<PhysicalHandle> pages(cached_.end() - static_cast<std::ptrdiff_t>(n),
                                    cached_.end());
  std::reverse(pages.begin(), pages.end());
  if (absl::Status s = backend_.MapPages(va, page_, pages.data(), n); !s.ok()) {
    for (std::size_t j = 0; j < *created; ++j) {
      ReleasePhysical(cached_.back());
      cached_.pop_back();
    }
    return s;
  }
  cached_.resize(cached_.size() - n);
  for (std::size_t i = 0; i < n; ++i) {
    DevicePtr at = va + i * page_;
    mapped_.emplace(at, pages[i]);
    Notify(AllocatorEventKind::kMap, at, page_);
  }
  return absl::OkStatus();
}

void PageHeap::ReleasePhysical(PhysicalHandle h) {
  backend_.ReleasePhysical(h);
  reserved_ -= page_;
  released_bytes_ += page_;
}

void PageHeap::Quiesce() {
  if (quiet_) return;
  backend_.Synchronize();
  quiet_ = true;
}

bool PageHeap::UnmapPage(DevicePtr va) {
  Quiesce();
  auto it = mapped_.find(va);
  const PhysicalHandle handle = it->second;
  if (!backend_.Unmap(va, page_).ok()) return false;
  mapped_.erase(it);
  // A lent page's handle is already in the cache or mapped elsewhere, and observers were
  // told it left this address when it was lent.
  if (lent_.erase(va) != 0) return true;
  cached_.push_back(handle);
  Notify(AllocatorEventKind::kUnmap, va, page_);
  return true;
}

void PageHeap::LendPage(DevicePtr va) {
  cached_.push_back(mapped_.at(va));
  lent_.insert(va);
  // For observers (traces, reports) the page leaves this address now: it is mapped once
  // more where it is needed, and counting it twice would show memory that is not there.
  Notify(AllocatorEventKind::kUnmap, va, page_);
}

bool PageHeap::RetireLent(DevicePtr va) {
  if (!lent_.contains(va)) return true;
  if (!backend_.Unmap(va, page_).ok()) return false;
  lent_.erase(va);
  mapped_.erase(va);
  return true;
}

absl::StatusOr<DevicePtr> PageHeap::AllocateSegment(std::size_t bytes) {
  absl::StatusOr<DevicePtr> seg = backend_.AllocateSegment(bytes);
  if (!seg.ok()) return seg;
  reserved_ += bytes;
  created_bytes_ += bytes;
  ++ranges_created_;
  Notify(AllocatorEventKind::kMap, *seg, bytes);
  return seg;
}

void PageHeap::FreeSegment(DevicePtr base, std::size_t bytes) {
  Quiesce();
  backend_.FreeSegment(base, bytes);
  reserved_ -= bytes;
  released_bytes_ += bytes;
  ++ranges_released_;
  Notify(AllocatorEventKind::kUnmap, base, bytes);
}

bool PageHeap::UnmapRange(DevicePtr base, std::size_t bytes) {
  std::vector<DevicePtr> vas;
  for (const auto& [va, handle] : mapped_) {
    if (va >= base && va < base + bytes) vas.push_back(va);
  }
  bool all = true;
  for (DevicePtr va : vas) all &= UnmapPage(va);
  return all;
}

void PageHeap::DropRange(DevicePtr base, std::size_t bytes) {
  if (UnmapRange(base, bytes)) {
    ReleaseRange(base, bytes);
  } else {
    dropped_.push_back({base, bytes});
  }
}

void PageHeap::RetryDroppedRanges() {
  std::erase_if(dropped_, [this](const Dropped& d) {
    if (!UnmapRange(d.base, d.bytes)) return false;
    ReleaseRange(d.base, d.bytes);
    return true;
  });
}

void PageHeap::ReleaseCached() {
  if (!lent_.empty()) {
    Quiesce();
    std::vector<DevicePtr> vas(lent_.begin(), lent_.end());
    for (DevicePtr va : vas) RetireLent(va);
  }
  RetryDroppedRanges();
  // A page still mapped at a lent address (the device refused the unmap) is not released
  // under its mapping: it stays cached until that address is retired.
  absl::flat_hash_set<PhysicalHandle> still_mapped;
  for (DevicePtr va : lent_) still_mapped.insert(mapped_.at(va));
  std::vector<PhysicalHandle> kept;
  for (PhysicalHandle h : cached_) {
    if (still_mapped.contains(h)) {
      kept.push_back(h);
    } else {
      ReleasePhysical(h);
    }
  }
  cached_ = std::move(kept);
}

}  // namespace gpumem
