#include "allocator/cuda_malloc_backend.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace gpumem {

using cuda::ScopedContext;
using cuda::ToStatus;

absl::StatusOr<CudaMallocBackend::OpenDevice> CudaMallocBackend::Open(
    const CudaBackendOptions& options) {
  auto driver = cuda::Driver();
  if (!driver.ok()) return driver.status();
  const cuda::DriverApi& api = **driver;
  OpenDevice open{&api, options.device, 0, nullptr, 0, 0};
  if (absl::Status s = ToStatus(api.cuDeviceGet(&open.cu_device, options.device),
                                "cuDeviceGet");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ToStatus(api.cuDevicePrimaryCtxRetain(&open.context, open.cu_device),
                                "cuDevicePrimaryCtxRetain");
      !s.ok()) {
    return s;
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  CUresult r;
  {
    ScopedContext scope(api, open.context);
    r = api.cuMemGetInfo(&free_bytes, &total_bytes);
  }
  if (r != CUDA_SUCCESS) {
    api.cuDevicePrimaryCtxRelease(open.cu_device);
    return ToStatus(r, "cuMemGetInfo");
  }
  open.total_bytes = total_bytes;
  open.capacity = options.capacity == 0 ? total_bytes : options.capacity;
  return open;
}

absl::StatusOr<std::unique_ptr<CudaMallocBackend>> CudaMallocBackend::Create(
    CudaBackendOptions options) {
  absl::StatusOr<OpenDevice> open = Open(options);
  if (!open.ok()) return open.status();
  return std::unique_ptr<CudaMallocBackend>(new CudaMallocBackend(*open));
}

CudaMallocBackend::CudaMallocBackend(const OpenDevice& open)
    : api_(*open.api),
      device_(open.device),
      cu_device_(open.cu_device),
      context_(open.context),
      total_bytes_(open.total_bytes),
      capacity_(open.capacity) {}

CudaMallocBackend::~CudaMallocBackend() {
  {
    ScopedContext scope(api_, context_);
    for (CUevent e : free_events_) api_.cuEventDestroy(e);
  }
  api_.cuDevicePrimaryCtxRelease(cu_device_);
}

void CudaMallocBackend::LogFailure(const absl::Status& status) const {
  std::fprintf(stderr, "gpumem: device %d: %s\n", device_,
               std::string(status.message()).c_str());
}

void CudaMallocBackend::LogFailure(CUresult result, const char* call) const {
  if (result != CUDA_ERROR_DEINITIALIZED) LogFailure(ToStatus(result, call));
}

absl::Status CudaMallocBackend::ChargeCapacity(std::size_t bytes, const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (counters_.physical_bytes + bytes > capacity_.load()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " of ", bytes, " bytes would pass the cap of ", capacity_.load(),
        " bytes (", counters_.physical_bytes, " held)"));
  }
  counters_.physical_bytes += bytes;
  counters_.peak_physical_bytes = std::max(counters_.peak_physical_bytes,
                                           counters_.physical_bytes);
  return absl::OkStatus();
}

void CudaMallocBackend::Uncharge(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.physical_bytes -= bytes;
}

// --- no virtual memory on this backend
absl::StatusOr<DevicePtr> CudaMallocBackend::ReserveAddressRange(std::size_t) {
  return absl::FailedPreconditionError("CudaMallocBackend has no virtual memory management");
}
void CudaMallocBackend::ReleaseAddressRange(DevicePtr, std::size_t) {
  LogFailure(absl::FailedPreconditionError("ReleaseAddressRange on a backend without VMM"));
}
absl::StatusOr<PhysicalHandle> CudaMallocBackend::CreatePhysical(std::size_t) {
  return absl::FailedPreconditionError("CudaMallocBackend has no virtual memory management");
}
void CudaMallocBackend::ReleasePhysical(PhysicalHandle) {
  LogFailure(absl::FailedPreconditionError("ReleasePhysical on a backend without VMM"));
}
absl::Status CudaMallocBackend::Map(DevicePtr, std::size_t, PhysicalHandle, std::size_t) {
  return absl::FailedPreconditionError("CudaMallocBackend has no virtual memory management");
}
absl::Status CudaMallocBackend::Unmap(DevicePtr, std::size_t) {
  return absl::FailedPreconditionError("Unmap on a backend without VMM");
}

// --- segments
absl::StatusOr<DevicePtr> CudaMallocBackend::AllocateSegment(std::size_t bytes) {
  CallClock clock(call_ns_);
  if (absl::Status s = ChargeCapacity(bytes, "segment"); !s.ok()) return s;
  CUdeviceptr ptr = 0;
  CUresult r;
  {
    ScopedContext scope(api_, context_);
    r = api_.cuMemAlloc(&ptr, bytes);
  }
  if (r != CUDA_SUCCESS) {
    Uncharge(bytes);
    return ToStatus(r, "cuMemAlloc");
  }
  std::lock_guard<std::mutex> lock(mu_);
  counters_.segment_bytes += bytes;
  counters_.mapped_bytes += bytes;
  ++counters_.segment_allocs;
  return static_cast<DevicePtr>(ptr);
}

void CudaMallocBackend::FreeSegment(DevicePtr ptr, std::size_t bytes) {
  CallClock clock(call_ns_);
  CUresult r;
  {
    ScopedContext scope(api_, context_);
    r = api_.cuMemFree(static_cast<CUdeviceptr>(ptr));
  }
  if (r != CUDA_SUCCESS) {
    LogFailure(r, "cuMemFree");
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  counters_.physical_bytes -= bytes;
  counters_.segment_bytes -= bytes;
  counters_.mapped_bytes -= bytes;
  ++counters_.segment_frees;
}

// --- stream order
EventHandle CudaMallocBackend::RecordEvent(StreamId stream) {
  CallClock clock(call_ns_);
  CUevent event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    }
  }
  ScopedContext scope(api_, context_);
  if (event == nullptr) {
    CUresult r = api_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
      // Without an event the only safe answer is to wait for the stream's work now.
      LogFailure(r, "cuEventCreate");
      api_.cuCtxSynchronize();
      return 0;
    }
  }
  CUresult r = api_.cuEventRecord(event, reinterpret_cast<CUstream>(stream));
  if (r != CUDA_SUCCESS) {
    LogFailure(r, "cuEventRecord");
    api_.cuCtxSynchronize();
    api_.cuEventDestroy(event);
    return 0;
  }
  return reinterpret_cast<EventHandle>(event);
}

absl::Status CudaMallocBackend::StreamWaitEvent(StreamId waiter, EventHandle event) {
  CallClock clock(call_ns_);
  if (event == 0) return absl::OkStatus();  // see RecordEvent: the work was waited for
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.stream_waits;
  }
  ScopedContext scope(api_, context_);
  CUresult r = api_.cuStreamWaitEvent(reinterpret_cast<CUstream>(waiter),
                                      reinterpret_cast<CUevent>(event), 0);
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  LogFailure(r, "cuStreamWaitEvent");
  return ToStatus(r, "cuStreamWaitEvent");
}

bool CudaMallocBackend::EventCompleted(EventHandle event) {
  CallClock clock(call_ns_);
  if (event == 0) return true;  // see RecordEvent: the work was waited for already
  CUresult r = api_.cuEventQuery(reinterpret_cast<CUevent>(event));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  // Tensors freed while the interpreter exits, after the driver: no work runs any more.
  if (r == CUDA_ERROR_DEINITIALIZED) return true;
  // Not known to be done: taking the memory back now could hand it to new work while
  // old work still writes it. The allocator takes it back after its next synchronize.
  LogFailure(r, "cuEventQuery");
  return false;
}

void CudaMallocBackend::ReleaseEvent(EventHandle event) {
  if (event == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_events_.push_back(reinterpret_cast<CUevent>(event));
}

void CudaMallocBackend::Synchronize() {
  CallClock clock(call_ns_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.synchronizes;
  }
  ScopedContext scope(api_, context_);
  if (CUresult r = api_.cuCtxSynchronize(); r != CUDA_SUCCESS) {
    LogFailure(r, "cuCtxSynchronize");
  }
}

std::uint64_t CudaMallocBackend::DeviceFreeBytes() const {
  CallClock clock(call_ns_);
  std::size_t free_bytes = 0, total_bytes = 0;
  ScopedContext scope(api_, context_);
  if (api_.cuMemGetInfo(&free_bytes, &total_bytes) != CUDA_SUCCESS) {
    return Backend::DeviceFreeBytes();
  }
  return free_bytes;
}

BackendCounters CudaMallocBackend::counters() const {
  BackendCounters out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = counters_;
  }
  out.host_call_ns = call_ns_.host_ns.load(std::memory_order_relaxed);
  out.background_call_ns = call_ns_.background_ns.load(std::memory_order_relaxed);
  return out;
}

}  // namespace gpumem
