// The CUPTI tracer's companion trace under GPUMEM_TRACE_MAX, written as the tracer writes
// it (its recorder options from the environment, each driver call with its API frame
// innermost) through many rings' worth of calls: its segment files stay within the
// companion's bound plus the ring's margin at every moment, and `gpumem report` reads it
// beside the main trace (a ring too) with the memory outside the allocator live at the end
// exact: buffers taken at the start, whose calls were in segments long deleted, included.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "profiler/cupti/tracer_options.h"
#include "profiler/recorder.h"
#include "profiler/trace_max.h"
#include "tests/profiler/ring_disk_use.h"
#include "tests/profiler/trace_test_util.h"
#include "tools/report/cupti_companion.h"
#include "tools/report/json_report.h"
#include "tools/report/report.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {

using testing::DiskUse;

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr char kTraceMax[] = "16M";  // the smallest GPUMEM_TRACE_MAX
constexpr std::uint64_t kCuptiBound = 16 * kMiB;  // max(SIZE / 16, 16M)
// docs/profiler.md, Bounded traces: the space reserved ahead in the two open segments (a
// sixteenth of a segment each) and, per segment, the drain that took it past its share
// (at most 16 KiB for the one recording thread).
constexpr std::uint64_t kMargin = 2 * (kCuptiBound / 8 / 16) + 8 * (16 << 10);
constexpr std::uint64_t kTotal = 80ull << 30;
constexpr std::uint64_t kReserved = 512 * kMiB;  // the allocator's, in the main trace
constexpr std::uint64_t kContext = 500 * kMiB;   // counted by the driver only
constexpr int kBuffers = 4;      // NCCL-like: taken at the start, held to the end
constexpr int kHeld = 16;        // a library's cache: one replaced every step
constexpr int kWorkspaces = 32;  // cuBLAS-like: taken and given back every step
constexpr std::uint64_t kBufferBase = 0x7f0000000000;
constexpr std::uint64_t kHeldBase = 0x7e0000000000;
constexpr std::uint64_t kWorkspaceBase = 0x7d0000000000;

// The driver calls of a long run, recorded as cupti_tracer.cc's Record does; keeps the
// bytes live by address as the tracer's table does, to give frees their size.
class DriverCalls {
 public:
  explicit DriverCalls(Recorder* recorder) : recorder_(recorder) {
    auto& stacks = recorder->writer().stacks();
    alloc_ = stacks.InternNamedFrame(format::FrameKind::kApi, "cuMemAlloc_v2", "[cuda-driver]", 0);
    free_ = stacks.InternNamedFrame(format::FrameKind::kApi, "cuMemFree_v2", "[cuda-driver]", 0);
  }

  void Alloc(std::uint64_t addr, std::uint64_t size) {
    live_bytes_ += size;
    sizes_[addr] = size;
    recorder_->RecordEvent(format::RecordType::kSegmentAlloc, 0, addr, size, 0, alloc_);
  }
  void Free(std::uint64_t addr) {
    const std::uint64_t size = sizes_[addr];
    live_bytes_ -= size;
    sizes_.erase(addr);
    recorder_->RecordEvent(format::RecordType::kSegmentFree, 0, addr, size, 0, free_);
  }

  void Start() {
    for (int i = 0; i < kBuffers; ++i) Alloc(kBufferBase + i * 256 * kMiB, (64 + i) * kMiB);
    for (int i = 0; i < kHeld; ++i) Alloc(kHeldBase + i * 256 * kMiB, Size());
  }
  void Step(std::uint64_t s) {
    for (int i = 0; i < kWorkspaces; ++i) Alloc(kWorkspaceBase + i * 256 * kMiB, Size());
    for (int i = kWorkspaces; i-- > 0;) Free(kWorkspaceBase + i * 256 * kMiB);
    const std::uint64_t held = kHeldBase + (s % kHeld) * 256 * kMiB;
    Free(held);
    Alloc(held, Size());
  }
  std::uint64_t live_bytes() const { return live_bytes_; }

 private:
  std::uint64_t Size() { return (1 + rng_() % 128) * kMiB / 2; }

  Recorder* recorder_;
  std::uint32_t alloc_ = 0, free_ = 0;
  std::mt19937_64 rng_{7};
  std::map<std::uint64_t, std::uint64_t> sizes_;
  std::uint64_t live_bytes_ = 0;
};

class CuptiRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("GPUMEM_TRACE", main_path_.c_str(), 1);
    setenv("GPUMEM_TRACE_MAX", kTraceMax, 1);
    setenv("GPUMEM_STACKS", "none", 1);
    unsetenv("GPUMEM_CUPTI_TRACE");
  }
  void TearDown() override {
    unsetenv("GPUMEM_TRACE");
    unsetenv("GPUMEM_TRACE_MAX");
    unsetenv("GPUMEM_STACKS");
    testing::RemoveRing(main_path_);
    testing::RemoveRing(CuptiCompanionPath(main_path_));
  }

  // The allocator's recorder, as hooks/trace_hook.cc opens it.
  std::unique_ptr<Recorder> OpenMain() {
    absl::StatusOr<RecorderOptions> options = RecorderOptions::FromEnvironment();
    EXPECT_TRUE(options.ok()) << options.status();
    absl::StatusOr<std::uint64_t> trace_max = ParseTraceMax(std::getenv("GPUMEM_TRACE_MAX"));
    EXPECT_TRUE(trace_max.ok()) << trace_max.status();
    options->trace_max_bytes = *trace_max;
    options->live_view = false;
    absl::StatusOr<std::unique_ptr<Recorder>> r = Recorder::Open(*options);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }

  const std::string main_path_ = gpumem::testing::TempPath("cupti_ring_run.gpumem");
};

TEST_F(CuptiRingTest, StaysWithinItsBoundAndReportsTheOutsideMemoryLiveAtTheEnd) {
  std::unique_ptr<Recorder> main = OpenMain();
  ASSERT_NE(main, nullptr);
  main->OnEvent({AllocatorEventKind::kMap, 0, 0x7ff000000000, kReserved, 0});

  absl::StatusOr<RecorderOptions> options = cupti::TracerOptionsFromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_EQ(options->trace_max_bytes, kCuptiBound);
  absl::StatusOr<std::unique_ptr<Recorder>> cupti = Recorder::Open(*options);
  ASSERT_TRUE(cupti.ok()) << cupti.status();
  const std::string cupti_path = (*cupti)->trace_path();
  ASSERT_EQ(cupti_path, CuptiCompanionPath(main_path_));
  ASSERT_TRUE((*cupti)->ring().bounded());

  DriverCalls calls(cupti->get());
  calls.Start();
  DiskUse most;
  std::uint64_t steps = 0;
  for (; (*cupti)->ring().segment() < 12 && steps < 2'000'000; ++steps) {
    calls.Step(steps);
    if (steps % 16 == 0) most = testing::Most(most, testing::RingDiskUse(cupti_path));
  }
  ASSERT_TRUE((*cupti)->Close().ok());
  most = testing::Most(most, testing::RingDiskUse(cupti_path));
  std::printf("%llu steps, %llu segments; most on disk: %llu bytes long, %llu allocated "
              "(bound %llu + margin %llu)\n",
              static_cast<unsigned long long>(steps),
              static_cast<unsigned long long>((*cupti)->ring().segment() + 1),
              static_cast<unsigned long long>(most.length),
              static_cast<unsigned long long>(most.allocated),
              static_cast<unsigned long long>(kCuptiBound),
              static_cast<unsigned long long>(kMargin));
  EXPECT_GE((*cupti)->ring().segment(), 12u);
  EXPECT_LE(most.length, kCuptiBound + kMargin);
  EXPECT_LE(most.allocated, kCuptiBound + kMargin);

  const std::uint64_t outside = calls.live_bytes();
  main->Step(DriverMemory{0, kTotal - kReserved - outside - kContext, kTotal});
  ASSERT_TRUE(main->Close().ok());

  // As `gpumem report` reads a folder's traces: the main ring's name alone is left.
  ASSERT_EQ(MainTraces({main_path_, cupti_path, format::RingSegmentName(cupti_path, 12),
                        format::RingSegmentName(main_path_, 0)}),
            std::vector<std::string>{main_path_});
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(main_path_);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::optional<trace::Trace> companion = LoadCuptiCompanion(main_path_);
  ASSERT_TRUE(companion.has_value());
  ASSERT_TRUE(companion->ring.has_value());
  EXPECT_TRUE(companion->ring->dropped);
  EXPECT_GE(companion->ring->first_segment, 4u);
  ReportOptions report_options;
  report_options.cupti = &*companion;
  const nlohmann::json j = ReportToJson(BuildReport(*t, report_options))["outside_allocator"];
  EXPECT_EQ(j["calls_recorded"], true);
  EXPECT_EQ(j["end"]["allocator_reserved"], kReserved);
  EXPECT_EQ(j["end"]["outside"]["unknown"], outside) << j.dump(2);
  EXPECT_EQ(j["end"]["remainder"], kContext);
}

}  // namespace
}  // namespace gpumem::report
