#include "tools/cli/doctor/cuda_probe.h"

#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_format.h"

namespace gpumem::cli::doctor {
namespace {

constexpr int kVmmAttribute = 102;  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED

// The versioned names are the ones cuda.h maps its calls to.
struct Api {
  int (*cuDriverGetVersion)(int*);
  int (*cuInit)(unsigned);
  int (*cuGetErrorName)(int, const char**);
  int (*cuDeviceGetCount)(int*);
  int (*cuDeviceGet)(int*, int);
  int (*cuDeviceGetName)(char*, int, int);
  int (*cuDeviceGetUuid)(unsigned char*, int);
  int (*cuDeviceTotalMem)(size_t*, int);
  int (*cuDeviceGetAttribute)(int*, int, int);
  int (*cuDevicePrimaryCtxRetain)(void**, int);
  int (*cuDevicePrimaryCtxRelease)(int);
  int (*cuCtxSetCurrent)(void*);
  int (*cuMemGetInfo)(size_t*, size_t*);
};

template <typename F>
bool Resolve(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

bool ResolveAll(void* lib, Api* api) {
  return Resolve(lib, "cuDriverGetVersion", &api->cuDriverGetVersion) &&
         Resolve(lib, "cuInit", &api->cuInit) &&
         Resolve(lib, "cuGetErrorName", &api->cuGetErrorName) &&
         Resolve(lib, "cuDeviceGetCount", &api->cuDeviceGetCount) &&
         Resolve(lib, "cuDeviceGet", &api->cuDeviceGet) &&
         Resolve(lib, "cuDeviceGetName", &api->cuDeviceGetName) &&
         (Resolve(lib, "cuDeviceGetUuid_v2", &api->cuDeviceGetUuid) ||
          Resolve(lib, "cuDeviceGetUuid", &api->cuDeviceGetUuid)) &&
         Resolve(lib, "cuDeviceTotalMem_v2", &api->cuDeviceTotalMem) &&
         Resolve(lib, "cuDeviceGetAttribute", &api->cuDeviceGetAttribute) &&
         Resolve(lib, "cuDevicePrimaryCtxRetain", &api->cuDevicePrimaryCtxRetain) &&
         Resolve(lib, "cuDevicePrimaryCtxRelease_v2", &api->cuDevicePrimaryCtxRelease) &&
         Resolve(lib, "cuCtxSetCurrent", &api->cuCtxSetCurrent) &&
         Resolve(lib, "cuMemGetInfo_v2", &api->cuMemGetInfo);
}

std::string ErrorName(const Api& api, int result) {
  const char* name = nullptr;
  if (api.cuGetErrorName(result, &name) == 0 && name != nullptr) return name;
  return absl::StrFormat("CUresult %d", result);
}

std::string FormatUuid(const unsigned char* b) {
  return absl::StrFormat(
      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
      b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

// Free memory needs a context; the primary one is what PyTorch would use too. Creating
// it is also what fails on a GPU that another process holds in exclusive mode.
void ReadFreeMemory(const Api& api, int device, GpuInfo* gpu) {
  void* context = nullptr;
  int r = api.cuDevicePrimaryCtxRetain(&context, device);
  if (r != 0) {
    gpu->memory_error = "cannot create a context: " + ErrorName(api, r);
    return;
  }
  size_t free_bytes = 0, total = 0;
  r = api.cuCtxSetCurrent(context);
  if (r == 0) r = api.cuMemGetInfo(&free_bytes, &total);
  if (r == 0) {
    gpu->free_bytes = free_bytes;
  } else {
    gpu->memory_error = "cuMemGetInfo failed: " + ErrorName(api, r);
  }
  api.cuCtxSetCurrent(nullptr);
  api.cuDevicePrimaryCtxRelease(device);
}

GpuInfo ReadGpu(const Api& api, int ordinal) {
  GpuInfo gpu;
  gpu.ordinal = ordinal;
  int device = 0;
  if (api.cuDeviceGet(&device, ordinal) != 0) return gpu;
  char name[256] = {};
  if (api.cuDeviceGetName(name, sizeof name - 1, device) == 0) gpu.name = name;
  unsigned char uuid[16] = {};
  if (api.cuDeviceGetUuid(uuid, device) == 0) gpu.uuid = FormatUuid(uuid);
  size_t total = 0;
  if (api.cuDeviceTotalMem(&total, device) == 0) gpu.total_bytes = total;
  int vmm = 0;
  if (api.cuDeviceGetAttribute(&vmm, kVmmAttribute, device) == 0) gpu.vmm = vmm;
  ReadFreeMemory(api, device, &gpu);
  return gpu;
}

}  // namespace

CudaProbe ProbeCuda() {
  CudaProbe probe;
  const char* override_path = std::getenv("GPUMEM_DOCTOR_LIBCUDA");
  const char* path = override_path != nullptr && *override_path ? override_path : "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    probe.load_error = absl::StrFormat("cannot load %s (%s)", path, why ? why : "?");
    return probe;
  }
  Api api{};
  if (!ResolveAll(lib, &api)) {
    probe.load_error = absl::StrFormat("%s lacks driver entry points: driver too old", path);
    return probe;
  }
  probe.loaded = true;
  api.cuDriverGetVersion(&probe.driver_version);
  probe.init_result = api.cuInit(0);
  if (probe.init_result != 0) {
    probe.init_error = ErrorName(api, probe.init_result);
    return probe;
  }
  int count = 0;
  if (api.cuDeviceGetCount(&count) != 0) count = 0;
  for (int i = 0; i < count; ++i) probe.gpus.push_back(ReadGpu(api, i));
  return probe;  // libcuda stays loaded: unloading a driver is never worth the risk
}

}  // namespace gpumem::cli::doctor
