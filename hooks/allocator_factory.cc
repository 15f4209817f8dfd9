#include "hooks/allocator_factory.h"

#if __has_include("allocator/caching_allocator.h")
#include "allocator/caching_allocator.h"
#define GPUMEM_HAVE_CACHING_ALLOCATOR 1
#else
#include "allocator/policies.h"
#endif

namespace gpumem::hooks {

absl::StatusOr<std::unique_ptr<DeviceAllocator>> MakeDeviceAllocator(
    Backend& backend, int device, AllocatorObserver* observer,
    const AllocatorSettings& settings) {
#ifdef GPUMEM_HAVE_CACHING_ALLOCATOR
  CachingAllocatorOptions options;
  options.device = device;
  options.observer = observer;
  options.stitch = settings.stitch;
  options.borrow = settings.borrow;
  options.background_unmap = settings.background_unmap;
  options.thread_cache = settings.thread_cache;
  options.headroom_bytes = settings.headroom_bytes;
  options.page_bytes = settings.page_bytes;
  return MakeCachingAllocator(backend, options);
#else
  // The caching allocator is not in this tree yet: the registry's "gpumem" policy (if
  // any) stands in, without device and observer.
  (void)device;
  (void)observer;
  (void)settings;
  return MakePolicy("gpumem", backend);
#endif
}

}  // namespace gpumem::hooks
