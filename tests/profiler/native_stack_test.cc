#include "profiler/native_stack.h"

#include <execinfo.h>
#include <gtest/gtest.h>

namespace gpumem {
namespace {

int g_calls = 0;
bool g_fail = false;

// Stands in for PyTorch's unwinder: the same frames as backtrace(), plus one frame of its
// own on top (as a real unwinder's entry frame would be), or nothing when told to fail.
std::size_t FakeUnwinder(void** pcs, std::size_t max) {
  ++g_calls;
  if (g_fail) return 0;
  return static_cast<std::size_t>(backtrace(pcs, static_cast<int>(max)));
}

__attribute__((noinline)) std::size_t Capture(RawFrame* out, std::size_t max) {
  const std::size_t n = CaptureNativeStack(out, max, 0);
  asm volatile("" ::: "memory");  // code after the call: no tail call, Capture keeps its frame
  return n;
}

TEST(NativeStackTest, AnInstalledUnwinderIsUsedAndFramesStartAtTheCaller) {
  RawFrame plain[16];
  const std::size_t n_plain = Capture(plain, 16);
  ASSERT_GT(n_plain, 2u);

  SetNativeUnwinder(&FakeUnwinder);
  g_calls = 0;
  g_fail = false;
  RawFrame viaunwinder[16];
  const std::size_t n = Capture(viaunwinder, 16);
  EXPECT_EQ(g_calls, 1);
  ASSERT_EQ(n, n_plain);
  // The same caller frame first (the return into Capture): the unwinder's own frame was
  // skipped. Frame 1 is this test at two call sites; the rest are the same.
  EXPECT_EQ(viaunwinder[0].a, plain[0].a);
  EXPECT_NE(viaunwinder[1].a, plain[1].a);
  for (std::size_t i = 2; i < n; ++i) EXPECT_EQ(viaunwinder[i].a, plain[i].a) << i;

  // A failing unwinder falls back to backtrace().
  g_fail = true;
  RawFrame fallback[16];
  EXPECT_EQ(Capture(fallback, 16), n_plain);
  EXPECT_EQ(g_calls, 2);
  SetNativeUnwinder(nullptr);
}

}  // namespace
}  // namespace gpumem
