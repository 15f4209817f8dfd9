// The verdict at an out-of-memory without a trace: no sites, so the class comes from the
// allocator's figures and the growth of its total at step marks, with the hint that
// GPUMEM_TRACE would name the site. What this process's own unusual libraries hold (the
// CUPTI tracer's count, read through CUDA_INJECTION64_PATH; here a stand-in tracer) is
// memory held outside the allocator, and the growth of any library's (NCCL's too) over
// step marks a leak outside it.
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"

namespace gpumem::hooks {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

class Environment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("GPUMEM_BACKEND", "sim", 1);
    unsetenv("GPUMEM_TRACE");
    ResetRegistryForTesting();
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new Environment);

TEST(OomVerdictUntracedTest, LeakFromTheTotalsGrowth) {
  ASSERT_EQ(gpumem_set_capacity(64 * kMiB, 0), 0);
  std::vector<void*> kept;
  ::testing::internal::CaptureStderr();
  for (int step = 0; step < 100; ++step) {
    void* p = gpumem_alloc(2 * kMiB, 0, nullptr);
    if (p == nullptr) break;
    kept.push_back(p);
    gpumem_step();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (void* p : kept) gpumem_free(p, 0, 0, nullptr);
  EXPECT_NE(err.find("verdict: leak"), std::string::npos) << err;
  EXPECT_NE(err.find("grew by 2.00 MiB per step"), std::string::npos) << err;
  EXPECT_NE(err.find("GPUMEM_TRACE=<file>"), std::string::npos) << err;
  EXPECT_EQ(err.find("leak warning"), std::string::npos) << err;  // needs a trace
}

TEST(OomVerdictUntracedTest, TooBigRequestIsGenuinePeak) {
  gpumem_step();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_alloc(1 << 30, 0, nullptr), nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("verdict: genuine peak"), std::string::npos) << err;
  EXPECT_NE(err.find("GPUMEM_TRACE=<file>"), std::string::npos) << err;
}

using Hold = void (*)(int, int, std::uint64_t, const char*);
// report::OutsideLibrary's numbers, as the tracer's exports take them.
constexpr int kNccl = 0;
constexpr int kOther = 3;

// The fake tracer, loaded privately as CUDA loads the real one.
Hold FakeTracer() {
  static Hold hold = [] {
    setenv("CUDA_INJECTION64_PATH", FAKE_TRACER_PATH, 1);
    void* handle = dlopen(FAKE_TRACER_PATH, RTLD_NOW | RTLD_LOCAL);
    return handle == nullptr ? nullptr : reinterpret_cast<Hold>(dlsym(handle, "fake_tracer_hold"));
  }();
  return hold;
}

// The fake tracer's `library` holds `base + step * per_step` at each of 40 step marks.
void HoldOver40Steps(int device, int library, std::uint64_t base, std::uint64_t per_step,
                     const char* site) {
  const Hold hold = FakeTracer();
  ASSERT_NE(hold, nullptr) << dlerror();
  for (int step = 1; step <= 40; ++step) {
    hold(device, library, base + step * per_step, site);
    gpumem_step();
  }
}

// PyTorch's allocator ran out with 20 MiB free on the device and 100 MiB reserved.
std::string ExplainOomOn(int device, int* cls) {
  gpumem_oom_figures_t f{};
  f.requested_bytes = 64 * kMiB;
  f.reserved_bytes = 100 * kMiB;
  f.allocated_bytes = 100 * kMiB;
  f.driver_free_bytes = 20 * kMiB;
  ::testing::internal::CaptureStderr();
  *cls = gpumem_explain_oom(device, &f);
  return ::testing::internal::GetCapturedStderr();
}

TEST(OomVerdictLibraries, AnExtensionThatKeepsMemoryEachStepIsALeakOutsideTheAllocator) {
  HoldOver40Steps(2, kOther, 0, 256 * kMiB, "ext.py:12 grow");
  int cls = -1;
  const std::string err = ExplainOomOn(2, &cls);
  EXPECT_EQ(cls, 0) << err;  // a leak
  EXPECT_NE(err.find("verdict: leak\n"), std::string::npos) << err;
  EXPECT_NE(err.find("memory held outside the allocator grew: ext.py:12 grow took 256.00 MiB per "
                     "step from the driver and kept it"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("(10.00 GiB at the OOM)"), std::string::npos) << err;
}

TEST(OomVerdictLibraries, AnExtensionsSteadyMemoryIsHeldOutside) {
  HoldOver40Steps(5, kOther, 12 * kGiB, 0, "ext.py:40 workspace");
  int cls = -1;
  const std::string err = ExplainOomOn(5, &cls);
  EXPECT_EQ(cls, 4) << err;  // held outside
  EXPECT_NE(err.find("verdict: memory held outside the allocator"), std::string::npos) << err;
  EXPECT_NE(err.find("libraries of this process other than the allocator, NCCL, cuBLAS and "
                     "cuDNN held 12.00 GiB, most of it from ext.py:40 workspace"),
            std::string::npos)
      << err;
}

// A process group made each step and never destroyed: NCCL's memory grows by a
// communicator's buffers a step, and that is what filled the device.
TEST(OomVerdictLibraries, NcclMemoryGrowingEachStepIsALeakOutsideTheAllocator) {
  HoldOver40Steps(3, kNccl, 0, 470 * kMiB, "train.py:239 main");
  int cls = -1;
  const std::string err = ExplainOomOn(3, &cls);
  EXPECT_EQ(cls, 0) << err;  // a leak
  EXPECT_NE(err.find("memory held outside the allocator grew: NCCL's memory for "
                     "train.py:239 main took 470.00 MiB per step from the driver and kept it"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("dist.destroy_process_group"), std::string::npos) << err;
}

// Before any OOM: NCCL's memory growing a communicator's worth at each step mark is warned
// of once it has grown at each of the last 5, with the line it is for; memory that stays
// is not.
TEST(OomVerdictLibraries, NcclMemoryGrowingEachStepIsWarnedOfEarly) {
  ::testing::internal::CaptureStderr();
  HoldOver40Steps(6, kNccl, 0, 470 * kMiB, "train.py:239 main");
  HoldOver40Steps(7, kNccl, 2 * kGiB, 0, "train.py:30 main");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("gpumem: leak warning at step "), std::string::npos) << err;
  EXPECT_NE(err.find(": NCCL's memory for train.py:239 main, outside the allocator, grew at each "
                     "of the last 5 step ends, +470.00 MiB/step"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("train.py:30 main"), std::string::npos) << err;
}

// NCCL's buffers, made once, are no sign of anything: the verdict is the allocator's.
TEST(OomVerdictLibraries, NcclMemoryThatStaysIsNotHeldAgainstTheRun) {
  HoldOver40Steps(4, kNccl, 2 * kGiB, 0, "train.py:30 main");
  int cls = -1;
  const std::string err = ExplainOomOn(4, &cls);
  EXPECT_EQ(cls, 2) << err;  // a genuine peak
  EXPECT_EQ(err.find("NCCL's allocations"), std::string::npos) << err;
}

// Where the tracer's libraries hold nothing, the verdict is what the allocator's figures say.
TEST(OomVerdictLibraries, NothingHeldChangesNothing) {
  ASSERT_NE(FakeTracer(), nullptr) << dlerror();
  int cls = -1;
  const std::string err = ExplainOomOn(7, &cls);
  EXPECT_EQ(cls, 2) << err;  // a genuine peak
  EXPECT_EQ(err.find("libraries of this process"), std::string::npos) << err;
}

}  // namespace
}  // namespace gpumem::hooks
