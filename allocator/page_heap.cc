#include "allocator/page_heap.h"

namespace gpumem {

PageHeap::PageHeap(Backend& backend, int device, AllocatorObserver* observer)
    : backend_(backend),
      device_(device),
      observer_(observer),
      page_(backend.granularity()),
      vmm_(backend.supports_vmm()) {}

PageHeap::~PageHeap() {
  // The allocator unmaps and frees everything before destroying the heap; whatever is
  // left (a caller leaked blocks) is still returned so the device is clean.
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

absl::StatusOr<DevicePtr> PageHeap::ReserveRange(std::size_t bytes) {
  return backend_.ReserveAddressRange(bytes);
}

void PageHeap::ReleaseRange(DevicePtr base, std::size_t bytes) {
  backend_.ReleaseAddressRange(base, bytes);
}

absl::Status PageHeap::MapPages(DevicePtr va, std::size_t n) {
  // Create what the cache cannot give first, so a failure leaves nothing half done.
  std::size_t missing = n > cached_.size() ? n - cached_.size() : 0;
  std::vector<PhysicalHandle> fresh;
  fresh.reserve(missing);
  for (std::size_t i = 0; i < missing; ++i) {
    absl::StatusOr<PhysicalHandle> h = backend_.CreatePhysical(page_);
    if (!h.ok()) {
      // Keep what was created: it is reserved either way and the caller may trim it.
      for (PhysicalHandle f : fresh) {
        cached_.push_back(f);
      }
      return h.status();
    }
    reserved_ += page_;
    fresh.push_back(*h);
  }
  for (PhysicalHandle f : fresh) cached_.push_back(f);
  for (std::size_t i = 0; i < n; ++i) {
    PhysicalHandle h = cached_.back();
    DevicePtr at = va + i * page_;
    if (absl::Status s = backend_.Map(at, page_, h, 0); !s.ok()) {
      // Undo this call's mappings; the pages are unused, so no synchronization is needed.
      for (std::size_t j = 0; j < i; ++j) {
        DevicePtr back = va + j * page_;
        backend_.Unmap(back, page_);
        cached_.push_back(mapped_[back]);
        mapped_.erase(back);
      }
      return s;
    }
    cached_.pop_back();
    mapped_.emplace(at, h);
    Notify(AllocatorEventKind::kMap, at, page_);
  }
  return absl::OkStatus();
}

void PageHeap::Quiesce() {
  if (quiet_) return;
  backend_.Synchronize();
  quiet_ = true;
}

void PageHeap::UnmapPage(DevicePtr va) {
  Quiesce();
  auto it = mapped_.find(va);
  backend_.Unmap(va, page_);
  cached_.push_back(it->second);
  mapped_.erase(it);
  Notify(AllocatorEventKind::kUnmap, va, page_);
}

absl::StatusOr<DevicePtr> PageHeap::AllocateSegment(std::size_t bytes) {
  absl::StatusOr<DevicePtr> seg = backend_.AllocateSegment(bytes);
  if (!seg.ok()) return seg;
  reserved_ += bytes;
  Notify(AllocatorEventKind::kMap, *seg, bytes);
  return seg;
}

void PageHeap::FreeSegment(DevicePtr base, std::size_t bytes) {
  Quiesce();
  backend_.FreeSegment(base, bytes);
  reserved_ -= bytes;
  Notify(AllocatorEventKind::kUnmap, base, bytes);
}

void PageHeap::UnmapRange(DevicePtr base, std::size_t bytes) {
  std::vector<DevicePtr> vas;
  for (const auto& [va, handle] : mapped_) {
    if (va >= base && va < base + bytes) vas.push_back(va);
  }
  for (DevicePtr va : vas) UnmapPage(va);
}

void PageHeap::ReleaseCached() {
  for (PhysicalHandle h : cached_) {
    backend_.ReleasePhysical(h);
    reserved_ -= page_;
  }
  cached_.clear();
}

}  // namespace gpumem
