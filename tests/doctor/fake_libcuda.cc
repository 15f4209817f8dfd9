// A stand-in libcuda.so.1 for `gpumem doctor`'s tests: the driver version, device count,
// cuInit's result, VMM support and free memory come from FAKE_CUDA_* variables, so each
// driver-level finding can be produced on a machine without a GPU.
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace {

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kTotalMiB = 81559;  // an H100 80GB

}  // namespace

extern "C" {

int cuDriverGetVersion(int* version) {
  *version = EnvInt("FAKE_CUDA_DRIVER", 12040);
  return 0;
}
int cuInit(unsigned) { return EnvInt("FAKE_CUDA_INIT", 0); }
int cuGetErrorName(int result, const char** name) {
  *name = result == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
int cuDeviceGetCount(int* count) {
  *count = EnvInt("FAKE_CUDA_DEVICES", 1);
  return 0;
}
int cuDeviceGet(int* device, int ordinal) {
  *device = ordinal;
  return 0;
}
int cuDeviceGetName(char* name, int length, int device) {
  std::strncpy(name, device == 0 ? "Fake GPU 0" : "Fake GPU 1", static_cast<std::size_t>(length));
  return 0;
}
// Device d's UUID is 16 bytes of 0x10 + d: GPU-10101010-1010-1010-1010-101010101010.
int cuDeviceGetUuid_v2(unsigned char* uuid, int device) {
  std::memset(uuid, 0x10 + device, 16);
  return 0;
}
int cuDeviceTotalMem_v2(std::size_t* bytes, int) {
  *bytes = kTotalMiB * kMiB;
  return 0;
}
int cuDeviceGetAttribute(int* value, int, int) {
  *value = EnvInt("FAKE_CUDA_VMM", 1);
  return 0;
}
int cuDevicePrimaryCtxRetain(void** context, int) {
  static int context_storage;
  *context = &context_storage;
  return 0;
}
int cuDevicePrimaryCtxRelease_v2(int) { return 0; }
int cuCtxSetCurrent(void*) { return 0; }
int cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total) {
  *free_bytes = static_cast<std::size_t>(EnvInt("FAKE_CUDA_FREE_MIB", 80000)) * kMiB;
  *total = kTotalMiB * kMiB;
  return 0;
}

}  // extern "C"
