// The CUDA driver API, loaded at run time with dlopen. Nothing links libcuda.so.1: the
// stub library in the toolkit only satisfies the linker, and a program linked against it
// would not even start on a machine without an NVIDIA driver (CI). Loading it lazily lets
// libgpumem.so and the tests run everywhere, and report "no CUDA driver" where there is none.
#pragma once

#include <cuda.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpumem::cuda {

// One pointer per driver entry point that gpumem uses. The names are cuda.h's, so the
// versioned symbol (cuMemAlloc_v2, ...) is the one the header means.
struct DriverApi {
#define GPUMEM_CUDA_DRIVER_FUNCTIONS(X)                                                   \
  X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent)            \
  X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree)      \
  X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree)            \
  X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)             \
  X(cuEventCreate) X(cuEventRecord) X(cuEventQuery) X(cuEventDestroy)                    \
  X(cuPointerGetAttribute) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)     \
  X(cuMemsetD32Async) X(cuMemcpyDtoH) X(cuEventSynchronize) X(cuStreamWaitEvent)       \
  X(cuMemRetainAllocationHandle) X(cuMemExportToShareableHandle)                         \
  X(cuMemImportFromShareableHandle)
#define GPUMEM_DECLARE_POINTER(name) decltype(&::name) name = nullptr;
  GPUMEM_CUDA_DRIVER_FUNCTIONS(GPUMEM_DECLARE_POINTER)
#undef GPUMEM_DECLARE_POINTER
};

// The driver, loaded and initialized (cuInit) once per process. Unavailable with the
// reason (no libcuda.so.1, no device, cuInit failed) where there is none.
absl::StatusOr<const DriverApi*> Driver();

// A status for a failed driver call: ResourceExhausted for CUDA_ERROR_OUT_OF_MEMORY,
// Internal otherwise, the message naming the call and the CUDA error name.
absl::Status ToStatus(CUresult result, const char* call);

// "CUDA_ERROR_..." for `result` (or the number where the driver cannot name it).
std::string ErrorName(CUresult result);

// Makes `context` current on this thread for the guard's lifetime and restores the
// thread's previous context afterwards: PyTorch calls the allocator from many threads,
// and switching a thread's context silently would switch the CUDA runtime's device too.
// While one is alive, InGpumemDriverCall() is true on this thread.
class ScopedContext {
 public:
  ScopedContext(const DriverApi& api, CUcontext context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const DriverApi& api_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
  bool outer_call_ = false;  // InGpumemDriverCall() before this guard
};

// Whether this thread is inside one of gpumem's own driver calls: a CUPTI tracer that
// sees the call then knows it is not another library's (gpumem_calling_driver).
bool InGpumemDriverCall();

}  // namespace gpumem::cuda
