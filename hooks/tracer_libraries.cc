#include "hooks/tracer_libraries.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace gpumem::hooks {
namespace {

struct TracerFunctions {
  std::uint64_t (*devices)() = nullptr;
  std::uint64_t (*bytes)(int, int) = nullptr;
  std::size_t (*site)(int, int, char*, std::size_t) = nullptr;
};

template <typename Fn>
void Find(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
}

// Looked for until CUDA has loaded the injection library (when it initializes, which may
// come after the first step mark), then settled: ours, or another one (a profiler's, an
// older tracer) that never will be. Never found where CUDA_INJECTION64_PATH is unset.
const TracerFunctions* Functions() {
  static std::mutex mu;
  static TracerFunctions found;
  static bool settled = false;
  std::lock_guard<std::mutex> lock(mu);
  if (settled) return found.devices == nullptr ? nullptr : &found;
  const char* path = std::getenv("CUDA_INJECTION64_PATH");
  if (path == nullptr || *path == '\0') return nullptr;
  // RTLD_NOLOAD: a handle only if CUDA has loaded it already; never loads it here.
  void* handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  settled = true;
  TracerFunctions f;
  Find(handle, "gpumem_cupti_library_devices", &f.devices);
  Find(handle, "gpumem_cupti_outside_bytes", &f.bytes);
  Find(handle, "gpumem_cupti_outside_site", &f.site);
  if (f.devices == nullptr || f.bytes == nullptr || f.site == nullptr) {
    dlclose(handle);
    return nullptr;
  }
  found = f;
  return &found;
}

}  // namespace

std::uint64_t TracerLibraryDevices() {
  const TracerFunctions* f = Functions();
  return f == nullptr ? 0 : f->devices();
}

std::uint64_t TracerLibraryBytes(int device, report::OutsideLibrary library) {
  const TracerFunctions* f = Functions();
  return f == nullptr ? 0 : f->bytes(device, static_cast<int>(library));
}

std::optional<TracerLibraryHolding> ReadTracerLibraries(int device,
                                                        report::OutsideLibrary library) {
  const TracerFunctions* f = Functions();
  if (f == nullptr) return std::nullopt;
  TracerLibraryHolding holding;
  holding.bytes = f->bytes(device, static_cast<int>(library));
  char site[512];
  const std::size_t n = f->site(device, static_cast<int>(library), site, sizeof(site));
  holding.site.assign(site, std::min(n, sizeof(site) - 1));
  return holding;
}

}  // namespace gpumem::hooks
