#include "allocator/cuda_vmm_backend.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace gpumem {

using cuda::ScopedContext;
using cuda::ToStatus;

absl::StatusOr<bool> DeviceSupportsVmm(int device) {
  auto driver = cuda::Driver();
  if (!driver.ok()) return driver.status();
  CUdevice dev = 0;
  if (absl::Status s = ToStatus((*driver)->cuDeviceGet(&dev, device), "cuDeviceGet"); !s.ok()) {
    return s;
  }
  int supported = 0;
  if (absl::Status s = ToStatus(
          (*driver)->cuDeviceGetAttribute(
              &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
          "cuDeviceGetAttribute");
      !s.ok()) {
    return s;
  }
  return supported != 0;
}

absl::StatusOr<std::unique_ptr<CudaVmmBackend>> CudaVmmBackend::Create(
    CudaBackendOptions options) {
  absl::StatusOr<bool> vmm = DeviceSupportsVmm(options.device);
  if (!vmm.ok()) return vmm.status();
  if (!*vmm) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", options.device, " has no virtual memory management support"));
  }
  absl::StatusOr<OpenDevice> open = Open(options);
  if (!open.ok()) return open.status();
  auto backend = std::unique_ptr<CudaVmmBackend>(new CudaVmmBackend(*open));
  backend->prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  backend->prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  backend->prop_.location.id = backend->cu_device_;
  {
    std::unique_lock lock(backend->access_mu_);
    backend->access_.push_back({backend->prop_.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE});
  }
  std::size_t granularity = 0;
  if (absl::Status s = ToStatus(
          backend->api_.cuMemGetAllocationGranularity(&granularity, &backend->prop_,
                                                      CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
      !s.ok()) {
    return s;
  }
  backend->granularity_ = granularity;
  return backend;
}

CudaVmmBackend::~CudaVmmBackend() = default;

absl::StatusOr<DevicePtr> CudaVmmBackend::ReserveAddressRange(std::size_t bytes) {
  CallClock clock(call_ns_);
  CUdeviceptr base = 0;
  CUresult r;
  {
    ScopedContext scope(api_, context_);
    r = api_.cuMemAddressReserve(&base, bytes, granularity_, 0, 0);
  }
  if (r != CUDA_SUCCESS) return ToStatus(r, "cuMemAddressReserve");
  std::lock_guard<std::mutex> lock(mu_);
  counters_.reserved_va_bytes += bytes;
  return static_cast<DevicePtr>(base);
}

void CudaVmmBackend::ReleaseAddressRange(DevicePtr base, std::size_t bytes) {
  CallClock clock(call_ns_);
  CUresult r;
  {
    ScopedContext scope(api_, context_);
    r = api_.cuMemAddressFree(static_cast<CUdeviceptr>(base), bytes);
  }
  if (r != CUDA_SUCCESS) {
    LogFailure(r, "cuMemAddressFree");
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  counters_.reserved_va_bytes -= bytes;
}

absl::StatusOr<PhysicalHandle> CudaVmmBackend::CreatePhysical(std::size_t bytes) {
  CallClock clock(call_ns_);
  if (absl::Status s = ChargeCapacity(bytes, "physical memory"); !s.ok()) return s;
  CUmemGenericAllocationHandle handle = 0;
  CUresult r;
  {
    ScopedContext scope(api_, context_);
    r = CreateHandle(&handle, bytes);
  }
  if (r != CUDA_SUCCESS) {
    Uncharge(bytes);
    return ToStatus(r, "cuMemCreate");
  }
  std::lock_guard<std::mutex> lock(mu_);
  physical_sizes_[handle] = bytes;
  ++counters_.physical_creates;
  return static_cast<PhysicalHandle>(handle);
}

CUresult CudaVmmBackend::CreateHandle(CUmemGenericAllocationHandle* handle, std::size_t bytes) {
  // Exportable pages cost nothing more; they let a tensor be sent to another process.
  if (exportable_.load(std::memory_order_relaxed)) {
    CUmemAllocationProp prop = prop_;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    const CUresult r = api_.cuMemCreate(handle, bytes, &prop, 0);
    if (r != CUDA_ERROR_NOT_SUPPORTED && r != CUDA_ERROR_INVALID_VALUE) return r;
    exportable_.store(false, std::memory_order_relaxed);
  }
  return api_.cuMemCreate(handle, bytes, &prop_, 0);
}

void CudaVmmBackend::ReleasePhysical(PhysicalHandle handle) {
  CallClock clock(call_ns_);
  CUresult r;
  {
    ScopedContext scope(api_, context_);
    r = api_.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle));
  }
  if (r != CUDA_SUCCESS) {
    LogFailure(r, "cuMemRelease");
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = physical_sizes_.find(handle);
  if (it == physical_sizes_.end()) return;
  counters_.physical_bytes -= it->second;
  ++counters_.physical_releases;
  physical_sizes_.erase(it);
}

absl::Status CudaVmmBackend::Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                                 std::size_t offset) {
  CallClock clock(call_ns_);
  std::shared_lock access(access_mu_);
  ScopedContext scope(api_, context_);
  CUdeviceptr ptr = static_cast<CUdeviceptr>(va);
  CUresult r = api_.cuMemMap(ptr, bytes, offset,
                             static_cast<CUmemGenericAllocationHandle>(handle), 0);
  if (r != CUDA_SUCCESS) return ToStatus(r, "cuMemMap");
  r = api_.cuMemSetAccess(ptr, bytes, access_.data(), access_.size());
  if (r != CUDA_SUCCESS) {
    api_.cuMemUnmap(ptr, bytes);
    return ToStatus(r, "cuMemSetAccess");
  }
  std::lock_guard<std::mutex> lock(mu_);
  mappings_[ptr] = bytes;
  counters_.mapped_bytes += bytes;
  ++counters_.maps;
  return absl::OkStatus();
}

CUresult CudaVmmBackend::SetAccess(CUdeviceptr base, std::size_t page_bytes, std::size_t n) {
  // Access is granted per address range, whatever the mappings under it: one call for
  // the run (as CUDA's vectorAddMMAP sample does), where the page table work happens. A
  // driver that refuses a range of several mappings gets one call per page from then on.
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (n == 1 || range_access_.load(std::memory_order_relaxed)) {
    r = api_.cuMemSetAccess(base, n * page_bytes, access_.data(), access_.size());
  }
  if (r == CUDA_SUCCESS || n == 1) return r;
  range_access_.store(false, std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) {
    r = api_.cuMemSetAccess(base + i * page_bytes, page_bytes, access_.data(), access_.size());
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

absl::Status CudaVmmBackend::MapPages(DevicePtr va, std::size_t page_bytes,
                                      const PhysicalHandle* handles, std::size_t n) {
  CallClock clock(call_ns_);
  if (n == 0) return absl::OkStatus();
  std::shared_lock access(access_mu_);
  ScopedContext scope(api_, context_);
  const CUdeviceptr base = static_cast<CUdeviceptr>(va);
  auto undo = [&](std::size_t mapped) {
    for (std::size_t j = 0; j < mapped; ++j) api_.cuMemUnmap(base + j * page_bytes, page_bytes);
  };
  for (std::size_t i = 0; i < n; ++i) {
    CUresult r = api_.cuMemMap(base + i * page_bytes, page_bytes, 0,
                               static_cast<CUmemGenericAllocationHandle>(handles[i]), 0);
    if (r != CUDA_SUCCESS) {
      undo(i);
      return ToStatus(r, "cuMemMap");
    }
  }
  if (CUresult r = SetAccess(base, page_bytes, n); r != CUDA_SUCCESS) {
    undo(n);
    return ToStatus(r, "cuMemSetAccess");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 0; i < n; ++i) mappings_[base + i * page_bytes] = page_bytes;
  counters_.mapped_bytes += n * page_bytes;
  counters_.maps += n;
  return absl::OkStatus();
}

absl::Status CudaVmmBackend::Unmap(DevicePtr va, std::size_t bytes) {
  CallClock clock(call_ns_);
  std::shared_lock access(access_mu_);
  CUresult r;
  {
    ScopedContext scope(api_, context_);
    r = api_.cuMemUnmap(static_cast<CUdeviceptr>(va), bytes);
  }
  if (r != CUDA_SUCCESS) {
    LogFailure(r, "cuMemUnmap");
    return ToStatus(r, "cuMemUnmap");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const CUdeviceptr start = static_cast<CUdeviceptr>(va);
  mappings_.erase(mappings_.lower_bound(start), mappings_.lower_bound(start + bytes));
  counters_.mapped_bytes -= bytes;
  ++counters_.unmaps;
  return absl::OkStatus();
}

absl::Status CudaVmmBackend::GrantPeerAccess(int peer_device) {
  CallClock clock(call_ns_);
  std::unique_lock access(access_mu_);  // no map or unmap until every mapping has it
  CUdevice peer = 0;
  if (absl::Status s = ToStatus(api_.cuDeviceGet(&peer, peer_device), "cuDeviceGet"); !s.ok()) {
    return s;
  }
  for (const CUmemAccessDesc& granted : access_) {
    if (granted.location.id == peer) return absl::OkStatus();
  }
  const CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, peer},
                             CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ScopedContext scope(api_, context_);
  for (const auto& [ptr, bytes] : mappings_) {
    if (CUresult r = api_.cuMemSetAccess(ptr, bytes, &desc, 1); r != CUDA_SUCCESS) {
      return ToStatus(r, "cuMemSetAccess for a peer device");
    }
  }
  for (const auto& [base, pages] : imported_) {
    for (const ImportedPage& page : pages) {
      if (CUresult r = api_.cuMemSetAccess(page.at, page.bytes, &desc, 1); r != CUDA_SUCCESS) {
        return ToStatus(r, "cuMemSetAccess for a peer device");
      }
    }
  }
  access_.push_back(desc);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<CUdeviceptr, std::size_t>>> CudaVmmBackend::MappingsUnder(
    DevicePtr va, std::size_t bytes) {
  std::vector<std::pair<CUdeviceptr, std::size_t>> under;
  std::lock_guard<std::mutex> lock(mu_);  // mappings_ changes only with mu_ held
  auto it = mappings_.upper_bound(static_cast<CUdeviceptr>(va));
  if (it != mappings_.begin()) --it;
  CUdeviceptr covered = static_cast<CUdeviceptr>(va);
  for (; it != mappings_.end() && it->first < va + bytes; ++it) {
    if (it->first > covered || it->first + it->second <= covered) break;
    under.emplace_back(it->first, it->second);
    covered = it->first + it->second;
  }
  if (under.empty() || covered < va + bytes) {
    return absl::NotFoundError(absl::StrCat("no mapped memory covers 0x", absl::Hex(va), " + ",
                                            bytes, " bytes on this device"));
  }
  return under;
}

absl::StatusOr<ExportedPages> CudaVmmBackend::ExportPages(DevicePtr va, std::size_t bytes) {
  CallClock clock(call_ns_);
  absl::StatusOr<std::vector<std::pair<CUdeviceptr, std::size_t>>> under =
      MappingsUnder(va, bytes);
  if (!under.ok()) return under.status();
  ExportedPages out{static_cast<DevicePtr>(under->front().first), {}};
  auto fail = [&out](absl::Status why) {
    for (const ExportedPage& page : out.pages) close(page.fd);
    return why;
  };
  ScopedContext scope(api_, context_);
  for (const auto& [start, size] : *under) {
    CUmemGenericAllocationHandle handle = 0;
    CUresult r = api_.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(start));
    if (r != CUDA_SUCCESS) return fail(ToStatus(r, "cuMemRetainAllocationHandle"));
    int fd = -1;
    r = api_.cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                          0);
    api_.cuMemRelease(handle);  // the retain's reference; the mapping keeps the page
    if (r != CUDA_SUCCESS) {
      return fail(ToStatus(r, exportable_.load() ? "cuMemExportToShareableHandle"
                                                 : "cuMemExportToShareableHandle (this driver "
                                                   "refused exportable pages)"));
    }
    out.pages.push_back({fd, size});
  }
  return out;
}

void CudaVmmBackend::UnmapImported(CUdeviceptr base, std::size_t bytes,
                                   const std::vector<ImportedPage>& pages) {
  for (const ImportedPage& page : pages) {
    api_.cuMemUnmap(page.at, page.bytes);
    api_.cuMemRelease(page.handle);
  }
  api_.cuMemAddressFree(base, bytes);
}

absl::StatusOr<DevicePtr> CudaVmmBackend::ImportPages(absl::Span<const ExportedPage> pages) {
  CallClock clock(call_ns_);
  std::size_t total = 0;
  for (const ExportedPage& page : pages) {
    if (page.bytes == 0 || page.bytes % granularity_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an imported page of ", page.bytes, " bytes is not a multiple of this device's ",
          granularity_, "-byte granularity"));
    }
    total += page.bytes;
  }
  if (total == 0) return absl::InvalidArgumentError("no pages to import");
  std::shared_lock access(access_mu_);
  ScopedContext scope(api_, context_);
  CUdeviceptr base = 0;
  if (CUresult r = api_.cuMemAddressReserve(&base, total, granularity_, 0, 0); r != CUDA_SUCCESS) {
    return ToStatus(r, "cuMemAddressReserve");
  }
  std::vector<ImportedPage> mapped;
  CUdeviceptr at = base;
  for (const ExportedPage& page : pages) {
    CUmemGenericAllocationHandle handle = 0;
    CUresult r = api_.cuMemImportFromShareableHandle(
        &handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(page.fd)),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r == CUDA_SUCCESS) {
      r = api_.cuMemMap(at, page.bytes, 0, handle, 0);
      if (r != CUDA_SUCCESS) api_.cuMemRelease(handle);
    }
    if (r == CUDA_SUCCESS) mapped.push_back({at, page.bytes, handle});
    if (r == CUDA_SUCCESS) r = api_.cuMemSetAccess(at, page.bytes, access_.data(), access_.size());
    if (r != CUDA_SUCCESS) {
      UnmapImported(base, total, mapped);
      return ToStatus(r, "mapping another process's page (cuMemImportFromShareableHandle, "
                         "cuMemMap, cuMemSetAccess)");
    }
    at += page.bytes;
  }
  std::lock_guard<std::mutex> lock(mu_);
  imported_[base] = std::move(mapped);
  return static_cast<DevicePtr>(base);
}

absl::Status CudaVmmBackend::ReleaseImported(DevicePtr base) {
  CallClock clock(call_ns_);
  std::shared_lock access(access_mu_);
  std::vector<ImportedPage> pages;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = imported_.find(static_cast<CUdeviceptr>(base));
    if (it == imported_.end()) {
      return absl::NotFoundError(absl::StrCat("0x", absl::Hex(base),
                                              " is no memory imported from another process"));
    }
    pages = std::move(it->second);
    imported_.erase(it);
  }
  std::size_t total = 0;
  for (const ImportedPage& page : pages) total += page.bytes;
  ScopedContext scope(api_, context_);
  UnmapImported(static_cast<CUdeviceptr>(base), total, pages);
  return absl::OkStatus();
}

}  // namespace gpumem
