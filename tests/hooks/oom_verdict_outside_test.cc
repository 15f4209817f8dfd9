// The verdict at an OOM says what the allocator held against what the rest of the process
// held outside it, where the driver gave its figures; without them it says nothing of it.
#include <gtest/gtest.h>

#include <string>

#include "profiler/oom_verdict.h"

namespace gpumem {
namespace {

constexpr std::uint64_t kGiB = 1ull << 30;

OomVerdictInput Peak() {
  OomVerdictInput in;
  in.device = 1;
  in.figures.request = 4 * kGiB;
  in.figures.allocated = 68 * kGiB;
  in.figures.capacity = 80 * kGiB;
  in.figures.finished_steps = 10;
  return in;
}

TEST(OomVerdictOutside, SaysWhatWasHeldOutsideTheAllocator) {
  OomVerdictInput in = Peak();
  in.reserved = 70 * kGiB;
  in.driver_free = kGiB;
  in.driver_total = 80 * kGiB;
  const std::string text = OomVerdictText(in, report::OomClass::kPeak);
  EXPECT_NE(text.find("gpumem:   memory: the allocator held 70.00 GiB, outside it 9.00 GiB (CUDA "
                      "context, NCCL, cuBLAS, cuDNN workspaces) of 80.00 GiB"),
            std::string::npos)
      << text;
}

// Where the CUPTI tracer counted each library's memory, the line splits it by library, as
// the "the allocator held 70.1 GB, NCCL 2.3 GB, other 1.1 GB of 79.2 GB" asks.
TEST(OomVerdictOutside, SaysWhichLibrariesHeldItWhereTheTracerCounted) {
  OomVerdictInput in = Peak();
  in.reserved = 70 * kGiB;
  in.driver_free = kGiB;
  in.driver_total = 80 * kGiB;
  in.library_bytes.emplace();
  (*in.library_bytes)[static_cast<std::size_t>(report::OutsideLibrary::kNccl)] = 2 * kGiB;
  (*in.library_bytes)[static_cast<std::size_t>(report::OutsideLibrary::kCublas)] = kGiB / 4;
  (*in.library_bytes)[static_cast<std::size_t>(report::OutsideLibrary::kOther)] = 5 * kGiB;
  const std::string text = OomVerdictText(in, report::OomClass::kPeak);
  EXPECT_NE(text.find("gpumem:   memory: the allocator held 70.00 GiB, outside it 9.00 GiB (NCCL "
                      "2.00 GiB, cuBLAS 256.00 MiB, other libraries of this process 5.00 GiB, "
                      "the rest 1.75 GiB: the CUDA context, kernels and calls not seen) of "
                      "80.00 GiB"),
            std::string::npos)
      << text;
}

// NVML's figures: what other processes hold is counted apart and named by pid, with the
// fix for the usual one (another rank's or a worker's context on this GPU).
TEST(OomVerdictOutside, OtherProcessesApart) {
  OomVerdictInput in = Peak();
  in.reserved = 70 * kGiB;
  in.driver_free = kGiB;
  in.driver_total = 80 * kGiB;
  in.processes = DeviceProcesses{75 * kGiB, {{4242, 3 * kGiB}, {77, kGiB}}};
  const std::string text = OomVerdictText(in, report::OomClass::kPeak);
  EXPECT_NE(text.find("the allocator held 70.00 GiB, outside it 5.00 GiB (CUDA context, NCCL, "
                      "cuBLAS, cuDNN workspaces), other processes 4.00 GiB of 80.00 GiB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpumem:   other processes hold 4.00 GiB of this GPU (pid 4242 3.00 GiB, "
                      "pid 77 1.00 GiB)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("torch.cuda.set_device(local_rank)"), std::string::npos) << text;

  in.processes = DeviceProcesses{75 * kGiB, {}};  // alone on the device: nothing more said
  EXPECT_EQ(OomVerdictText(in, report::OomClass::kPeak).find("other processes"),
            std::string::npos);
}

// A shared GPU: the cap had room, the driver did not, and other processes held it.
TEST(OomVerdictOutside, ADeviceFullOfOtherProcessesMemoryIsHeldOutside) {
  constexpr std::uint64_t kMiB = 1 << 20;
  OomVerdictInput in;
  in.figures.request = 32 * kMiB;
  in.figures.allocated = 129 * kMiB;
  in.figures.capacity = 4 * kGiB;
  in.figures.finished_steps = 400;
  in.figures.device_free = 27 * kMiB;
  in.figures.held_outside = 138 * kGiB;
  in.processes = DeviceProcesses{0, {{2848, 138 * kGiB}}};
  const report::OomClass cls = ClassifyDyingOom(in);
  ASSERT_EQ(cls, report::OomClass::kHeldOutside);
  const std::string text = OomVerdictText(in, cls);
  EXPECT_NE(text.find("verdict: memory held outside the allocator"), std::string::npos) << text;
  EXPECT_NE(text.find("the request of 32.00 MiB was under the cap of 4.00 GiB (allocated "
                      "129.00 MiB), but the driver had 27.00 MiB free: other processes "
                      "held 138.00 GiB (pid 2848 138.00 GiB). Without that memory the request "
                      "would have fit."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("nvidia-smi"), std::string::npos) << text;
  EXPECT_EQ(text.find("cupy"), std::string::npos) << text;  // no library of its own held it
}

// What this process's own unusual libraries held (the CUPTI tracer's count) is memory held
// outside the allocator too, named by the site holding most; where it grew from step to
// step, the OOM is a leak outside the allocator, with that fix.
OomVerdictInput HeldByAnExtension() {
  constexpr std::uint64_t kMiB = 1 << 20;
  OomVerdictInput in;
  in.gpumem_allocator = true;
  in.figures.request = 64 * kMiB;
  in.figures.allocated = 100 * kMiB;
  in.figures.capacity = 139 * kGiB;
  in.figures.finished_steps = 550;
  in.figures.device_free = 300 * kMiB;
  in.figures.headroom = 512 * kMiB;
  in.libraries.bytes = 138 * kGiB;
  in.libraries.site = "ext.py:12 grow";
  in.figures.held_outside = in.libraries.bytes;
  return in;
}

TEST(OomVerdictOutside, AnExtensionsMemoryIsHeldOutside) {
  const OomVerdictInput in = HeldByAnExtension();
  const report::OomClass cls = ClassifyDyingOom(in);
  ASSERT_EQ(cls, report::OomClass::kHeldOutside);
  const std::string text = OomVerdictText(in, cls);
  EXPECT_NE(text.find("but the driver had 300.00 MiB free (gpumem keeps 512.00 MiB free for "
                      "other libraries): libraries of this process other than the allocator, "
                      "NCCL, cuBLAS and cuDNN held 138.00 GiB, most of it from ext.py:12 "
                      "grow. Without that memory"),
            std::string::npos)
      << text;
  // Its own library, no other process: what to free, not where to run.
  EXPECT_NE(text.find("fix: The device was full of memory a library of this process held"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("nvidia-smi"), std::string::npos) << text;
}

TEST(OomVerdictOutside, AnExtensionsMemoryThatGrewIsALeakOutsideTheAllocator) {
  OomVerdictInput in = HeldByAnExtension();
  in.libraries.growth = report::Growth{.bytes_per_step = 256 << 20, .r2 = 1};
  in.libraries.growth_steps = 32;
  const report::OomClass cls = ClassifyDyingOom(in);
  ASSERT_EQ(cls, report::OomClass::kLeak);
  const std::string text = OomVerdictText(in, cls);
  EXPECT_NE(text.find("verdict: leak\n"), std::string::npos) << text;
  EXPECT_NE(text.find("evidence: memory held outside the allocator grew: ext.py:12 grow took "
                      "256.00 MiB per step from the driver and kept it, over the last 32 step "
                      "ends (138.00 GiB at the OOM); the request of 64.00 MiB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(report::OutsideLeakFix(report::OutsideLibrary::kOther)), std::string::npos) << text;

  // The cap refused it: the allocator's own figures decide, whatever grew outside.
  in.figures.allocated = 139 * kGiB;
  EXPECT_EQ(ClassifyDyingOom(in), report::OomClass::kPeak);
  EXPECT_EQ(OomVerdictText(in, report::OomClass::kPeak).find("grew: ext.py"), std::string::npos);
}

// Graphs kept alive hold their pools' free memory: said, with the fix, where there is any.
TEST(OomVerdictOutside, MemoryPrivatePoolsHoldIsSaid) {
  OomVerdictInput in = Peak();
  in.figures.allocated = 60 * kGiB;
  in.private_pools_free = 18 * kGiB;
  const std::string text = OomVerdictText(in, report::OomClass::kPeak);
  EXPECT_NE(text.find("gpumem:   pools: 18.00 GiB of the reserved memory is free inside private "
                      "pools (CUDA graphs or torch.cuda.MemPool still alive), which only "
                      "allocations into those pools can use; without it the request would have "
                      "fit."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pool=first_graph.pool()"), std::string::npos) << text;
  in.private_pools_free = 0;
  EXPECT_EQ(OomVerdictText(in, report::OomClass::kPeak).find("pools:"), std::string::npos);
}

TEST(OomVerdictOutside, SilentWithoutTheDriversFigures) {
  OomVerdictInput in = Peak();
  in.reserved = 70 * kGiB;
  in.driver_free = kGiB;  // no total: the driver was not asked
  EXPECT_EQ(OomVerdictText(in, report::OomClass::kPeak).find("outside it"), std::string::npos);
}

// Under gpumem's allocator with pages above the granule, a request that fit under the cap
// gets the finer page as an option; one that could not fit, or another allocator's, not.
TEST(OomVerdictPages, FinerPagesOfferedWhereTheRequestFitUnderTheCap) {
  OomVerdictInput in = Peak();  // 68 + 4 of 80 GiB
  in.gpumem_allocator = true;
  in.page_bytes = 8 << 20;
  const std::string text = OomVerdictText(in, report::OomClass::kPeak);
  EXPECT_NE(text.find("gpumem:   note: gpumem's pages are 8.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("GPUMEM_PAGE_SIZE=2M"), std::string::npos) << text;

  OomVerdictInput too_big = in;
  too_big.figures.request = 20 * kGiB;
  EXPECT_EQ(OomVerdictText(too_big, report::OomClass::kPeak).find("GPUMEM_PAGE_SIZE=2M"),
            std::string::npos);
  OomVerdictInput granule = in;
  granule.page_bytes = 2 << 20;
  EXPECT_EQ(OomVerdictText(granule, report::OomClass::kPeak).find("GPUMEM_PAGE_SIZE=2M"),
            std::string::npos);
  EXPECT_EQ(OomVerdictText(in, report::OomClass::kLeak).find("GPUMEM_PAGE_SIZE=2M"),
            std::string::npos);
  OomVerdictInput native = in;
  native.gpumem_allocator = false;
  EXPECT_EQ(OomVerdictText(native, report::OomClass::kPeak).find("GPUMEM_PAGE_SIZE=2M"),
            std::string::npos);
}

}  // namespace
}  // namespace gpumem
