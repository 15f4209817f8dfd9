// The narrow interface between allocation policy and the device. Policies (pools, page
// heap, the PyTorch emulations) never call CUDA: they call this. CudaVmmBackend and
// CudaMallocBackend implement it on a GPU; SimBackend implements it in host memory with
// exact byte accounting and a capacity cap, so every policy decision is testable on CI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpumem {

// A device virtual address. Kept as an integer: policies do arithmetic on it and never
// dereference it.
using DevicePtr = std::uintptr_t;

// Streams are opaque to policies (cudaStream_t on a GPU, a small integer in simulation).
using StreamId = std::uintptr_t;
inline constexpr StreamId kDefaultStream = 0;

// Physical memory created by CreatePhysical (cuMemCreate). Opaque, never zero when valid.
using PhysicalHandle = std::uint64_t;

// An event recorded on a stream (cuEventRecord). Opaque, never zero when valid.
using EventHandle = std::uint64_t;

struct BackendCounters {
  std::uint64_t physical_bytes = 0;       // created physical memory + segments: "reserved"
  std::uint64_t peak_physical_bytes = 0;
  std::uint64_t mapped_bytes = 0;         // virtual bytes currently backed by a mapping
  std::uint64_t reserved_va_bytes = 0;    // virtual address space held
  std::uint64_t segment_bytes = 0;        // part of physical_bytes held as plain segments
  std::uint64_t physical_creates = 0;
  std::uint64_t physical_releases = 0;
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t segment_allocs = 0;
  std::uint64_t segment_frees = 0;
  std::uint64_t synchronizes = 0;         // Synchronize() calls: each stalls the host
  std::uint64_t stream_waits = 0;         // StreamWaitEvent() calls: the host goes on
  // Host time spent inside the device's calls above (and event queries): what the
  // allocator's device work costs a training step's host thread. Zero where simulated.
  std::uint64_t host_call_ns = 0;
  // The same on the allocator's own threads (BackgroundUnmapper), not in host_call_ns:
  // time the training thread does not wait for.
  std::uint64_t background_call_ns = 0;
};

// A page of physical memory exported to be mapped by another process (CUDA IPC of a
// tensor): a file descriptor (cuMemExportToShareableHandle) and the page's size.
struct ExportedPage {
  int fd = -1;
  std::size_t bytes = 0;
};
struct ExportedPages {
  DevicePtr first_page = 0;  // where the first page is mapped here
  std::vector<ExportedPage> pages;
};

// Set on the allocator's own threads: their device calls count as background_call_ns.
inline thread_local bool t_background_driver_calls = false;

class Backend {
 public:
  virtual ~Backend() = default;

  // Physical allocation unit (cuMemGetAllocationGranularity); sizes passed to
  // CreatePhysical / Map are multiples of it.
  virtual std::size_t granularity() const = 0;
  // Bytes of device memory this backend may hold at once (a cap, or the device total).
  virtual std::uint64_t capacity() const = 0;
  // False where the device cannot remap memory (no VMM): only the segment calls work.
  virtual bool supports_vmm() const = 0;
  // Bytes of device memory anyone in the process could still get (cuMemGetInfo's free):
  // libraries that allocate outside the allocator need some. A driver call: the allocator
  // asks only before creating memory, never per allocation. The default: what the cap
  // leaves.
  virtual std::uint64_t DeviceFreeBytes() const {
    const std::uint64_t held = counters().physical_bytes;
    return capacity() > held ? capacity() - held : 0;
  }

  // --- virtual memory (cuMemAddressReserve / cuMemAddressFree)
  virtual absl::StatusOr<DevicePtr> ReserveAddressRange(std::size_t bytes) = 0;
  virtual void ReleaseAddressRange(DevicePtr base, std::size_t bytes) = 0;

  // --- physical memory (cuMemCreate / cuMemRelease). ResourceExhausted past capacity.
  virtual absl::StatusOr<PhysicalHandle> CreatePhysical(std::size_t bytes) = 0;
  virtual void ReleasePhysical(PhysicalHandle handle) = 0;

  // --- mappings (cuMemMap + cuMemSetAccess / cuMemUnmap). Map places `bytes` of
  // `handle`, from `offset`, at `va`, inside a reserved range. An Unmap that fails leaves
  // the mapping in place: the caller still holds it and may try again later.
  virtual absl::Status Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                           std::size_t offset) = 0;
  virtual absl::Status Unmap(DevicePtr va, std::size_t bytes) = 0;
  // Maps handles[i] (each `page_bytes`, from offset 0) at va + i * page_bytes: all or
  // nothing. The default maps one by one; a device may grant access to the whole run at
  // once (one cuMemSetAccess instead of one per page: the costly part of a map).
  virtual absl::Status MapPages(DevicePtr va, std::size_t page_bytes,
                                const PhysicalHandle* handles, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (absl::Status s = Map(va + i * page_bytes, page_bytes, handles[i], 0); !s.ok()) {
        // Best effort: a device that refuses these unmaps too cannot keep all or nothing.
        for (std::size_t j = 0; j < i; ++j) Unmap(va + j * page_bytes, page_bytes).IgnoreError();
        return s;
      }
    }
    return absl::OkStatus();
  }

  // --- peers. Lets `peer_device` read and write this device's memory, mapped now and
  // from here on (PyTorch asks once it has enabled peer access between the two devices,
  // for a copy between their tensors: nn.DataParallel's scatter). Memory from cudaMalloc
  // needs nothing more; a VMM mapping carries its access device by device.
  virtual absl::Status GrantPeerAccess(int peer_device) {
    (void)peer_device;
    return absl::OkStatus();
  }

  // --- memory shared with other processes (torch.multiprocessing sending CUDA tensors).
  // The pages mapped under [va, va + bytes), each exported as a descriptor the caller
  // owns and closes. Unimplemented where memory is not mapped page by page.
  virtual absl::StatusOr<ExportedPages> ExportPages(DevicePtr va, std::size_t bytes) {
    (void)va;
    (void)bytes;
    return absl::UnimplementedError(
        "this backend does not map memory page by page, so it cannot share it with another "
        "process (use GPUMEM_BACKEND=vmm)");
  }
  // Maps pages another process exported, one after the other, at a new address range this
  // device (and each peer granted) can read and write. The descriptors stay the caller's.
  // Not charged to the capacity: the memory is the exporter's.
  virtual absl::StatusOr<DevicePtr> ImportPages(absl::Span<const ExportedPage> pages) {
    (void)pages;
    return absl::UnimplementedError(
        "this backend does not map memory page by page, so it cannot map another process's");
  }
  // Unmaps a range ImportPages made and gives its addresses back.
  virtual absl::Status ReleaseImported(DevicePtr base) {
    (void)base;
    return absl::NotFoundError("no memory imported from another process here");
  }

  // --- plain segments (cudaMalloc / cudaFree), for policies without VMM.
  // ResourceExhausted past capacity.
  virtual absl::StatusOr<DevicePtr> AllocateSegment(std::size_t bytes) = 0;
  virtual void FreeSegment(DevicePtr ptr, std::size_t bytes) = 0;

  // --- stream order (cuEventRecord / cuStreamWaitEvent / cuEventQuery / cuEventDestroy)
  virtual EventHandle RecordEvent(StreamId stream) = 0;
  // Work queued on `waiter` after this call runs after the work queued before `event`
  // (on its own stream), without blocking the host. An error leaves `waiter` unordered:
  // callers wait for a Synchronize() then.
  virtual absl::Status StreamWaitEvent(StreamId waiter, EventHandle event) = 0;
  // True once the work queued before the event has run; false while it may not have,
  // which includes a query that failed: callers wait for a Synchronize() then.
  virtual bool EventCompleted(EventHandle event) = 0;
  virtual void ReleaseEvent(EventHandle event) = 0;
  // Blocks until all work queued on every stream is done (cuCtxSynchronize).
  virtual void Synchronize() = 0;

  virtual BackendCounters counters() const = 0;
};

}  // namespace gpumem
