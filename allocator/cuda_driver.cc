#include "allocator/cuda_driver.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace gpumem::cuda {
namespace {

#define GPUMEM_STRINGIFY_EXPANDED(name) GPUMEM_STRINGIFY(name)
#define GPUMEM_STRINGIFY(name) #name

// Used while loading, before Driver() can answer (it would recurse into its own start).
std::string NameWith(const DriverApi& api, CUresult result, const char* call) {
  const char* name = nullptr;
  if (api.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) name = "?";
  return absl::StrCat(call, " failed: ", name);
}

absl::StatusOr<const DriverApi*> LoadDriver() {
  // RTLD_NOLOAD first: inside PyTorch the runtime has loaded it already.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("no CUDA driver: cannot load libcuda.so.1 (", why ? why : "?", ")"));
  }
  static DriverApi api;  // filled once, then read-only
#define GPUMEM_RESOLVE(name)                                                          \
  api.name = reinterpret_cast<decltype(api.name)>(                                    \
      dlsym(lib, GPUMEM_STRINGIFY_EXPANDED(name)));                                   \
  if (api.name == nullptr) {                                                          \
    return absl::UnavailableError(absl::StrCat("CUDA driver lacks ",                  \
                                               GPUMEM_STRINGIFY_EXPANDED(name),       \
                                               ": driver older than CUDA 13 headers")); \
  }
  GPUMEM_CUDA_DRIVER_FUNCTIONS(GPUMEM_RESOLVE)
#undef GPUMEM_RESOLVE
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) return absl::UnavailableError(NameWith(api, r, "cuInit"));
  int count = 0;
  r = api.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    return absl::UnavailableError(NameWith(api, r, "cuDeviceGetCount"));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: the driver sees 0 devices");
  return &api;
}

}  // namespace

absl::StatusOr<const DriverApi*> Driver() {
  static const absl::StatusOr<const DriverApi*> driver = LoadDriver();
  return driver;
}

std::string ErrorName(CUresult result) {
  auto driver = Driver();
  const char* name = nullptr;
  if (driver.ok() && (*driver)->cuGetErrorName(result, &name) == CUDA_SUCCESS && name) {
    return name;
  }
  return absl::StrCat("CUresult ", static_cast<int>(result));
}

absl::Status ToStatus(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  // cuInit may fail before the table is usable; name it without the driver then.
  std::string name = result == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
                     : result == CUDA_ERROR_NO_DEVICE   ? "CUDA_ERROR_NO_DEVICE"
                                                        : ErrorName(result);
  std::string message = absl::StrCat(call, " failed: ", name);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

namespace {
thread_local bool t_in_driver_call = false;
}  // namespace

bool InGpumemDriverCall() { return t_in_driver_call; }

ScopedContext::ScopedContext(const DriverApi& api, CUcontext context)
    : api_(api), outer_call_(t_in_driver_call) {
  t_in_driver_call = true;
  if (api_.cuCtxGetCurrent(&previous_) != CUDA_SUCCESS) previous_ = nullptr;
  if (previous_ != context && api_.cuCtxSetCurrent(context) == CUDA_SUCCESS) {
    switched_ = true;
  }
}

ScopedContext::~ScopedContext() {
  // Restored even when it was none: a thread left on our device's context would make the
  // CUDA runtime believe that device is current.
  if (switched_) api_.cuCtxSetCurrent(previous_);
  t_in_driver_call = outer_call_;
}

}  // namespace gpumem::cuda
