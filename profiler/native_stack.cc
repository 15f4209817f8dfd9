#include "profiler/native_stack.h"

#include <execinfo.h>

#include <algorithm>
#include <atomic>

namespace gpumem {
namespace {
std::atomic<NativeUnwinder> g_unwinder{nullptr};
}  // namespace

void SetNativeUnwinder(NativeUnwinder unwinder) { g_unwinder.store(unwinder); }

// Not inlined, so the frame count to skip is the same at every call site.
__attribute__((noinline)) std::size_t CaptureNativeStack(RawFrame* out, std::size_t max,
                                                         std::size_t skip) {
  constexpr std::size_t kMaxDepth = 256;
  void* pcs[kMaxDepth];
  const std::size_t want = std::min(kMaxDepth - 2, max + skip + 1);
  // backtrace() unwinds with the compiler's unwind tables (_Unwind_Backtrace): it works
  // without frame pointers. Its first call loads libgcc_s; later calls do not allocate.
  const NativeUnwinder unwinder = g_unwinder.load(std::memory_order_relaxed);
  int got = unwinder != nullptr ? static_cast<int>(unwinder(pcs, std::min(kMaxDepth, want + 4)))
                                : 0;
  if (got == 0) got = backtrace(pcs, static_cast<int>(want + 2));
  // Where our caller's frame is: normally pcs[1], but a sanitizer's backtrace()
  // interceptor or an installed unwinder adds frames of its own, so look for the return
  // address.
  int first = static_cast<int>(skip) + 1;
  const void* caller = __builtin_return_address(0);
  for (int i = 0; i < got && i < 6; ++i) {
    if (pcs[i] == caller) {
      first = i + static_cast<int>(skip);
      break;
    }
  }
  std::size_t n = 0;
  for (int i = first; i < got && n < max; ++i) {
    out[n++] = RawFrame{reinterpret_cast<std::uint64_t>(pcs[i]), 0, RawFrame::kNativeTag};
  }
  return n;
}

}  // namespace gpumem
