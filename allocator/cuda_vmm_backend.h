// CudaVmmBackend: CUDA virtual memory management. Physical pages (cuMemCreate) are mapped
// into reserved virtual ranges (cuMemAddressReserve + cuMemMap + cuMemSetAccess) and can
// be unmapped and mapped again elsewhere, which is what lets the policy stitch free pages
// into one fresh range instead of failing on fragmentation. Segments, events, the
// context and the cap come from CudaMallocBackend.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "allocator/cuda_malloc_backend.h"

namespace gpumem {

// Whether `device` can map memory (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED).
absl::StatusOr<bool> DeviceSupportsVmm(int device);

class CudaVmmBackend final : public CudaMallocBackend {
 public:
  // FailedPrecondition where the device has no VMM support (use CudaMallocBackend).
  static absl::StatusOr<std::unique_ptr<CudaVmmBackend>> Create(CudaBackendOptions options);
  ~CudaVmmBackend() override;

  bool supports_vmm() const override { return true; }

  absl::StatusOr<DevicePtr> ReserveAddressRange(std::size_t bytes) override;
  void ReleaseAddressRange(DevicePtr base, std::size_t bytes) override;
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::size_t bytes) override;
  void ReleasePhysical(PhysicalHandle handle) override;
  absl::Status Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                   std::size_t offset) override;
  absl::Status Unmap(DevicePtr va, std::size_t bytes) override;
  absl::Status MapPages(DevicePtr va, std::size_t page_bytes, const PhysicalHandle* handles,
                        std::size_t n) override;
  absl::Status GrantPeerAccess(int peer_device) override;
  absl::StatusOr<ExportedPages> ExportPages(DevicePtr va, std::size_t bytes) override;
  absl::StatusOr<DevicePtr> ImportPages(absl::Span<const ExportedPage> pages) override;
  absl::Status ReleaseImported(DevicePtr base) override;

 private:
  // A page of another process's mapped here (ImportPages).
  struct ImportedPage {
    CUdeviceptr at;
    std::size_t bytes;
    CUmemGenericAllocationHandle handle;  // released once unmapped
  };
  explicit CudaVmmBackend(const OpenDevice& open) : CudaMallocBackend(open) {}
  // Grants the devices in access_ to the `n` pages of `page_bytes` mapped from `ptr`: one
  // call for the run, or one per page once the driver has refused a run of several
  // mappings. Called with access_mu_ held.
  CUresult SetAccess(CUdeviceptr ptr, std::size_t page_bytes, std::size_t n);
  // cuMemCreate, exportable while the driver allows it (exportable_).
  CUresult CreateHandle(CUmemGenericAllocationHandle* handle, std::size_t bytes);
  // The mappings under [va, va + bytes), in order, if they cover it without a gap.
  absl::StatusOr<std::vector<std::pair<CUdeviceptr, std::size_t>>> MappingsUnder(
      DevicePtr va, std::size_t bytes);
  // Unmaps and releases imported pages and frees their `bytes` of addresses from `base`.
  void UnmapImported(CUdeviceptr base, std::size_t bytes, const std::vector<ImportedPage>& pages);

  CUmemAllocationProp prop_{};
  // Held shared by maps and unmaps, exclusively while a peer is granted every mapping,
  // so that no mapping misses a peer.
  std::shared_mutex access_mu_;
  // This device first, then each peer granted; guarded by access_mu_.
  std::vector<CUmemAccessDesc> access_;
  // start -> bytes; changed only with access_mu_ held shared and mu_ held, so read
  // under access_mu_ held exclusively with no other lock.
  std::map<CUdeviceptr, std::size_t> mappings_;
  // Another process's pages mapped here (ImportPages): range base -> each page's start and
  // size. Guarded like mappings_, and granted to peers with them.
  std::map<CUdeviceptr, std::vector<ImportedPage>> imported_;
  // Whether pages are created exportable (a POSIX file descriptor handle); cleared once
  // the driver refuses such a page, which is then created as before.
  std::atomic<bool> exportable_{true};
  // Access granted to a run of pages in one call until the driver refuses one (MapPages).
  std::atomic<bool> range_access_{true};
  std::unordered_map<PhysicalHandle, std::size_t> physical_sizes_;  // guarded by mu_
};

}  // namespace gpumem
