// Stands in for libgpumem_cupti.so's exports in tests without a GPU: what "this process's
// own libraries" hold on a device is set by the test (fake_tracer_hold), and libgpumem
// reads it as it reads the real tracer's, through CUDA_INJECTION64_PATH.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace {
constexpr int kDevices = 64;
std::uint64_t g_bytes[kDevices] = {};
std::string g_sites[kDevices];
std::uint64_t g_devices = 0;
}  // namespace

#define FAKE_TRACER_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_TRACER_EXPORT void fake_tracer_hold(int device, std::uint64_t bytes, const char* site) {
  g_bytes[device] = bytes;
  g_sites[device] = site;
  g_devices |= std::uint64_t{1} << device;
}

FAKE_TRACER_EXPORT std::uint64_t gpumem_cupti_library_devices() { return g_devices; }

FAKE_TRACER_EXPORT std::uint64_t gpumem_cupti_library_bytes(int device) {
  return device >= 0 && device < kDevices ? g_bytes[device] : 0;
}

FAKE_TRACER_EXPORT std::size_t gpumem_cupti_library_site(int device, char* buf,
                                                         std::size_t len) {
  const std::string site = device >= 0 && device < kDevices ? g_sites[device] : "";
  if (len > 0) {
    const std::size_t n = std::min(site.size(), len - 1);
    site.copy(buf, n);
    buf[n] = '\0';
  }
  return site.size();
}
