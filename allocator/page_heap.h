// PageHeap: the physical side of the caching allocator. It owns every physical page and
// plain segment the allocator holds, maps pages into virtual ranges, keeps unmapped pages
// cached for reuse, and makes sure no page is unmapped while queued work may touch it.
// Not thread-safe: the CachingAllocator calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/backend.h"
#include "allocator/observer.h"

namespace gpumem {

class PageHeap {
 public:
  // `page_bytes`: the unit of mapping, rounded up to a multiple of the device's
  // granularity (0: the granularity).
  PageHeap(Backend& backend, int device, AllocatorObserver* observer,
           std::size_t page_bytes = 0);
  ~PageHeap();
  PageHeap(const PageHeap&) = delete;
  PageHeap& operator=(const PageHeap&) = delete;

  std::size_t page_bytes() const { return page_; }
  bool vmm() const { return vmm_; }
  Backend& backend() { return backend_; }

  // --- virtual ranges
  absl::StatusOr<DevicePtr> ReserveRange(std::size_t bytes);
  void ReleaseRange(DevicePtr base, std::size_t bytes);

  // Backs [va, va + n pages) with pages: cached ones first, then new ones. All or nothing:
  // ResourceExhausted (nothing mapped, no page created) when the device has no room for
  // the new pages.
  absl::Status MapPages(DevicePtr va, std::size_t n);
  // Creates pages until `n` are cached, so the next maps of up to `n` pages create none.
  // All or nothing: on failure the pages it created are released again. Returns how many
  // it created.
  absl::StatusOr<std::size_t> CachePages(std::size_t n);
  // Unmaps the page at `va` and caches it. Synchronizes the device first unless that
  // already happened since the last BeginSlowPath(): pending work may use the page.
  // False when the device refused: the page stays mapped at `va`, as before.
  bool UnmapPage(DevicePtr va);

  // Stitching without waiting for the device. Puts the page mapped at `va` in the cache at
  // once, to be mapped elsewhere, while it stays mapped at `va` too (a page may be mapped
  // at two addresses). Safe only when the page's next user runs in stream order after the
  // work that may still touch it at `va` (the same stream, or one made to wait for an
  // event recorded after that work), and only if the next MapPages takes it. The caller keeps `va` unused and calls RetireLent(va) once that work is done.
  // Observers get kUnmap for `va` here, not at RetireLent: a page is never counted twice.
  void LendPage(DevicePtr va);
  // Unmaps a lent page's old address (no synchronization: the caller knows the work that
  // used it is done). Nothing to do if ReleaseCached already did it. False when the
  // device refused: the address stays lent, to be retired again later.
  bool RetireLent(DevicePtr va);
  // A lent page's old address that the caller unmapped itself (BackgroundUnmapper).
  void ForgetLent(DevicePtr va) {
    lent_.erase(va);
    mapped_.erase(va);
  }
  std::size_t lent_pages() const { return lent_.size(); }

  // Called at the start of every slow path: work may have been queued since the last
  // synchronization.
  void BeginSlowPath() { quiet_ = false; }
  // Waits for all queued work (once per slow path).
  void Quiesce();
  bool quiet() const { return quiet_; }

  // --- plain segments, for devices without VMM
  absl::StatusOr<DevicePtr> AllocateSegment(std::size_t bytes);
  void FreeSegment(DevicePtr base, std::size_t bytes);

  std::size_t cached_pages() const { return cached_.size(); }
  // Returns every cached page to the device (first waiting for the device and unmapping
  // lent addresses, so no page is released while still mapped; a page whose lent address
  // the device would not unmap stays cached). Ranges left by DropRange go too.
  void ReleaseCached();
  // Unmaps every page inside [base, base + bytes) and releases the range (teardown). A
  // page the device will not unmap keeps the range: both go at a later ReleaseCached.
  void DropRange(DevicePtr base, std::size_t bytes);

  std::uint64_t reserved_bytes() const { return reserved_; }
  // Cumulative bytes of pages created and segments obtained / released.
  std::uint64_t created_bytes() const { return created_bytes_; }
  std::uint64_t released_bytes() const { return released_bytes_; }
  // Virtual ranges and segments held now, and cumulative.
  std::uint64_t ranges() const { return ranges_created_ - ranges_released_; }
  std::uint64_t ranges_created() const { return ranges_created_; }
  std::uint64_t ranges_released() const { return ranges_released_; }

 private:
  void Notify(AllocatorEventKind kind, DevicePtr ptr, std::size_t bytes);
  void ReleasePhysical(PhysicalHandle h);
  // Unmaps every page inside the range; whether all of them went.
  bool UnmapRange(DevicePtr base, std::size_t bytes);
  // Releases the dropped ranges whose pages have all been unmapped now.
  void RetryDroppedRanges();

  Backend& backend_;
  const int device_;
  AllocatorObserver* const observer_;
  const std::size_t page_;
  const bool vmm_;
  bool quiet_ = false;
  std::vector<PhysicalHandle> cached_;                      // unmapped, ready to map
  absl::flat_hash_map<DevicePtr, PhysicalHandle> mapped_;   // page va -> its page
  absl::flat_hash_set<DevicePtr> lent_;                     // mapped, page lent elsewhere
  struct Dropped {
    DevicePtr base;
    std::size_t bytes;
  };
  std::vector<Dropped> dropped_;  // ranges to release once the device unmaps their pages
  // Page-aligned range starts -> what the backend reserved (ReserveRange), for pages
  // larger than the device's granularity.
  absl::flat_hash_map<DevicePtr, DevicePtr> reserved_bases_;
  std::uint64_t reserved_ = 0;                              // pages + segments held
  std::uint64_t created_bytes_ = 0;
  std::uint64_t released_bytes_ = 0;
  std::uint64_t ranges_created_ = 0;
  std::uint64_t ranges_released_ = 0;
};

}  // namespace gpumem
