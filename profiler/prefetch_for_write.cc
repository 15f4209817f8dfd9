#include "profiler/prefetch_for_write.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace gpumem {
namespace {
bool DetectPrefetchW() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 8)) != 0;
#else
  return false;
#endif
}
}  // namespace

const bool kHasPrefetchW = DetectPrefetchW();

}  // namespace gpumem
