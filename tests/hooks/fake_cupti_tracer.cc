// Stands in for libgpumem_cupti.so's exports in tests without a GPU: what "this process's
// own libraries" hold on a device is set by the test (fake_tracer_hold, by library as
// report::OutsideLibrary numbers them), and libgpumem reads it as it reads the real
// tracer's, through CUDA_INJECTION64_PATH.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace {
constexpr int kDevices = 64;
constexpr int kLibraries = 5;  // report::kOutsideLibraries
std::uint64_t g_bytes[kDevices][kLibraries] = {};
std::string g_sites[kDevices][kLibraries];
std::uint64_t g_devices = 0;

bool Valid(int device, int library) {
  return device >= 0 && device < kDevices && library >= 0 && library < kLibraries;
}
}  // namespace

#define FAKE_TRACER_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_TRACER_EXPORT void fake_tracer_hold(int device, int library, std::uint64_t bytes,
                                         const char* site) {
  if (!Valid(device, library)) return;
  g_bytes[device][library] = bytes;
  g_sites[device][library] = site;
  g_devices |= std::uint64_t{1} << device;
}

FAKE_TRACER_EXPORT std::uint64_t gpumem_cupti_library_devices() { return g_devices; }

FAKE_TRACER_EXPORT std::uint64_t gpumem_cupti_outside_bytes(int device, int library) {
  return Valid(device, library) ? g_bytes[device][library] : 0;
}

FAKE_TRACER_EXPORT std::size_t gpumem_cupti_outside_site(int device, int library, char* buf,
                                                         std::size_t len) {
  const std::string site = Valid(device, library) ? g_sites[device][library] : "";
  if (len > 0) {
    const std::size_t n = std::min(site.size(), len - 1);
    site.copy(buf, n);
    buf[n] = '\0';
  }
  return site.size();
}
