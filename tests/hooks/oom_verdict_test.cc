// The verdict at an out-of-memory, in the dying process, with a trace open: gpumem's
// allocator (gpumem_alloc returning NULL) and PyTorch's in profile-only mode (events
// through gpumem_record_event, then gpumem_explain_oom); and the early leak warning at
// step marks. GPUMEM_LEAK_WARN_STEPS=0 (a second ctest run of EarlyWarning) silences it.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"
#include "hooks/gpumem_trace.h"
#include "hooks/trace_hook.h"
#include "profiler/raw_record.h"
#include "profiler/recorder.h"

namespace gpumem::hooks {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

const std::string& TracePath() {
  static const std::string* path = new std::string(
      ::testing::TempDir() + "oom_verdict_test_" + std::to_string(getpid()) + ".gpumem");
  return *path;
}
class Environment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_TRACE", TracePath().c_str(), 1);
    setenv("GPUMEM_STACKS", "native", 1);
    ResetRegistryForTesting();
    ASSERT_EQ(gpumem_profile_start(), 0);
  }
  void TearDown() override { std::remove(TracePath().c_str()); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new Environment);

int Count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Marks a step end; returns what gpumem printed at it (a leak warning, or nothing).
std::string StepPrinting() {
  ::testing::internal::CaptureStderr();
  gpumem_step();
  return ::testing::internal::GetCapturedStderr();
}

// A stack whose site is "file:line function", as profile-only mode's Python stacks are.
std::uint32_t SiteStack(const char* file, int line, const char* function) {
  TraceWriter& writer = TraceRecorder()->writer();
  const std::uint32_t frame =
      writer.stacks().InternNamedFrame(format::FrameKind::kPython, function, file, line);
  const RawFrame raw{frame, 0, RawFrame::kNamedTag};
  return writer.stacks().Intern(&raw, 1);
}

// The figures PyTorch's OOM observer gives: the request, what it reserved, and what the
// driver had free.
gpumem_oom_figures_t Figures(std::uint64_t requested, std::uint64_t reserved,
                             std::uint64_t driver_free = 0) {
  gpumem_oom_figures_t f{};
  f.requested_bytes = requested;
  f.reserved_bytes = reserved;
  f.driver_free_bytes = driver_free;
  return f;
}

// PyTorch's allocator in profile-only mode, as libgpumem_torch reports it.
struct FakeTorchDevice {
  int device;
  std::uint64_t next = 0x7f0000000000ull;
  std::uint64_t Alloc(std::uint64_t size, std::uint32_t stack) {
    next += size + (1 << 20) * static_cast<std::uint64_t>(device + 1);
    gpumem_record_event(GPUMEM_EVENT_ALLOC, device, next, size, 0, stack, 0);
    return next;
  }
  void Free(std::uint64_t addr) { gpumem_record_event(GPUMEM_EVENT_FREE, device, addr, 0, 0, 0, 0); }
};

TEST(OomVerdictTest, AllocatorLeakNamesGrowthPerStep) {
  ASSERT_EQ(gpumem_set_capacity(96 * kMiB, 0), 0);
  gpumem_step();
  std::vector<void*> kept;
  ::testing::internal::CaptureStderr();
  for (int step = 0; step < 200; ++step) {
    void* transient = gpumem_alloc(4 * kMiB, 0, nullptr);
    void* leaked = gpumem_alloc(2 * kMiB, 0, nullptr);
    if (transient == nullptr || leaked == nullptr) {
      if (transient != nullptr) gpumem_free(transient, 0, 0, nullptr);
      if (leaked != nullptr) kept.push_back(leaked);
      break;
    }
    kept.push_back(leaked);
    gpumem_free(transient, 4 * kMiB, 0, nullptr);
    gpumem_step();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (void* p : kept) gpumem_free(p, 0, 0, nullptr);
  EXPECT_NE(err.find("verdict: leak"), std::string::npos) << err;
  EXPECT_NE(err.find("+2.00 MiB/step"), std::string::npos) << err;
  EXPECT_NE(err.find("top live sites"), std::string::npos) << err;
  EXPECT_NE(err.find("trace: " + TracePath()), std::string::npos) << err;
  EXPECT_NE(err.find("fix: "), std::string::npos) << err;
}

TEST(OomVerdictTest, AllocatorTooBigRequestIsGenuinePeak) {
  ASSERT_EQ(gpumem_set_capacity(96 * kMiB, 0), 0);  // its own cap, whatever ran before
  gpumem_step();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_alloc(1 << 30, 0, nullptr), nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("verdict: genuine peak"), std::string::npos) << err;
  EXPECT_EQ(err.find("GPUMEM_TRACE=<file>"), std::string::npos) << err;  // sites are recorded
}

// Graphs kept alive, each holding its pool's free memory: not fragmentation (no request
// outside the pools could use it), and said as what it is.
TEST(OomVerdictTest, AllocatorOomBesidePrivatePoolsNamesThem) {
  ASSERT_EQ(gpumem_set_capacity(96 * kMiB, 0), 0);
  gpumem_step();
  // Blocks of whole pages whichever page size an earlier test started the device with.
  constexpr std::uint64_t kFirstPool = 101;
  for (std::uint64_t pool = kFirstPool; pool < kFirstPool + 4; ++pool) {
    void* p = gpumem_alloc_in_pool(16 * kMiB, 0, nullptr, pool);
    ASSERT_NE(p, nullptr) << pool;
    gpumem_free(p, 0, 0, nullptr);
  }
  EXPECT_EQ(gpumem_private_pools_free(0), 64 * kMiB);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_alloc(40 * kMiB, 0, nullptr), nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (std::uint64_t pool = kFirstPool; pool < kFirstPool + 4; ++pool) gpumem_release_pool(0, pool);
  EXPECT_EQ(err.find("verdict: fragmentation"), std::string::npos) << err;
  EXPECT_NE(err.find("pools: 64.00 MiB of the reserved memory is free inside private pools"),
            std::string::npos)
      << err;
  EXPECT_EQ(gpumem_private_pools_free(0), 0u);
}

// cuDNN's workspace tries fail dozens of times in one step and the step goes on: one full
// verdict, then the count at the 1st, 2nd, 4th and 8th repeat only.
TEST(OomVerdictTest, CaughtOomsOfOneStepAreCountedNotRepeated) {
  gpumem_step();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(gpumem_alloc(ssize_t{1} << 50, 0, nullptr), nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(err, "out of memory: verdict: genuine peak"), 1) << err;
  EXPECT_EQ(Count(err, "out of memory: requested"), 1) << err;  // the report line too
  EXPECT_EQ(Count(err, "out-of-memory errors in this step so far"), 4) << err;
  EXPECT_NE(err.find("9 out-of-memory errors in this step so far"), std::string::npos) << err;
}

TEST(OomVerdictTest, ProfileModeLeakNamesTheSite) {
  FakeTorchDevice torch{1};
  ASSERT_EQ(gpumem_trace_capacity(1, 256 * kMiB, 3), 0);
  const std::uint32_t leak = SiteStack("train.py", 42, "train_step");
  const std::uint32_t model = SiteStack("model.py", 10, "forward");
  torch.Alloc(50 * kMiB, model);  // the weights: live, not growing
  for (int step = 0; step < 12; ++step) {
    const std::uint64_t activations = torch.Alloc(30 * kMiB, model);
    torch.Alloc(3 * kMiB, leak);
    torch.Free(activations);
    gpumem_step();
  }
  const gpumem_oom_figures_t f = Figures(200 * kMiB, 130 * kMiB, 10 * kMiB);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_explain_oom(1, &f), 0);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("device 1: out of memory: verdict: leak"), std::string::npos) << err;
  EXPECT_NE(err.find("+3.00 MiB/step     train.py:42 train_step"), std::string::npos) << err;
  EXPECT_NE(err.find("steady             model.py:10 forward"), std::string::npos) << err;
  EXPECT_NE(err.find("cap of 256.00 MiB"), std::string::npos) << err;
}

// The same leak with PyTorch's cache holding far more free than the request, in pieces
// it could not use: still a leak, and the pieces are counted in the steps they cost.
TEST(OomVerdictTest, ProfileModeLeakCutShortByPiecesOfTheCacheSaysSo) {
  FakeTorchDevice torch{33};
  ASSERT_EQ(gpumem_trace_capacity(33, 256 * kMiB, 3), 0);
  const std::uint32_t leak = SiteStack("train.py", 42, "train_step");
  torch.Alloc(50 * kMiB, SiteStack("model.py", 10, "forward"));
  for (int step = 0; step < 12; ++step) {
    torch.Alloc(3 * kMiB, leak);
    gpumem_step();
  }
  const gpumem_oom_figures_t f = Figures(10 * kMiB, 230 * kMiB, 1 * kMiB);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_explain_oom(33, &f), 0);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("device 33: out of memory: verdict: leak"), std::string::npos) << err;
  EXPECT_NE(err.find("; the cache also held 144.00 MiB free, in pieces too small for the "
                     "request (fragmentation), which brought this OOM about 48 steps early"),
            std::string::npos)
      << err;
}

// A batch longer every step, live at the optimizer's step and freed after it: what each
// step end sees grows, but nothing is kept from one step to the next. No warning, and the
// OOM is a peak.
TEST(OomVerdictTest, ProfileModeBatchLongerEveryStepIsAPeak) {
  FakeTorchDevice torch{4};
  ASSERT_EQ(gpumem_trace_capacity(4, 256 * kMiB, 3), 0);
  const std::uint32_t batch = SiteStack("warmup.py", 12, "fit");
  torch.Alloc(50 * kMiB, SiteStack("warmup.py", 3, "build"));
  ::testing::internal::CaptureStderr();
  for (int step = 0; step < 20; ++step) {
    const std::uint64_t x = torch.Alloc((4 + step) * kMiB, batch);
    gpumem_step();
    torch.Free(x);
  }
  const gpumem_oom_figures_t f = Figures(240 * kMiB, 60 * kMiB, 10 * kMiB);
  EXPECT_EQ(gpumem_explain_oom(4, &f), 2);  // a genuine peak
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(err, "warmup.py:12 fit grew"), 0) << err;  // no warning of the batch
  EXPECT_NE(err.find("device 4: out of memory: verdict: genuine peak"), std::string::npos) << err;
}

TEST(OomVerdictTest, ProfileModeFragmentationFromCachedPieces) {
  FakeTorchDevice torch{3};
  ASSERT_EQ(gpumem_trace_capacity(3, 1024 * kMiB, 3), 0);
  torch.Alloc(400 * kMiB, SiteStack("frag.py", 5, "load"));
  gpumem_step();
  // 600 MiB cached, in pieces PyTorch could not use
  const gpumem_oom_figures_t f = Figures(300 * kMiB, 1000 * kMiB);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_explain_oom(3, &f), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("verdict: fragmentation"), std::string::npos) << err;
  EXPECT_NE(err.find("expandable_segments"), std::string::npos) << err;
}

// 1 MiB more at each step: the warning comes once, at the 5th rise of what the site kept
// from earlier steps (a block counts from the step end after the one it was made in); a
// steady rate keeps the projected step where it was, so it is not repeated; a rate 8
// times higher moves the projection, and it is said again until the projection settles.
TEST(OomVerdictTest, EarlyWarning) {
  const char* env = std::getenv("GPUMEM_LEAK_WARN_STEPS");
  const bool off = env != nullptr && std::string(env) == "0";
  FakeTorchDevice torch{2};
  ASSERT_EQ(gpumem_trace_capacity(2, 1024 * kMiB, 3), 0);
  const std::uint32_t grow = SiteStack("warn.py", 7, "grow");
  torch.Alloc(10 * kMiB, SiteStack("warn.py", 3, "setup"));
  torch.Alloc(1 * kMiB, grow);
  gpumem_step();  // the site's first step end: 1 MiB
  std::vector<std::string> said;
  for (int i = 1; i <= 25; ++i) {
    torch.Alloc((i <= 15 ? 1 : 8) * kMiB, grow);
    const std::string err = StepPrinting();
    said.push_back(Count(err, "warn.py:7 grow") > 0 ? err : "");
  }
  if (off) {
    for (const std::string& s : said) EXPECT_EQ(s, "");
    return;
  }
  for (int i = 1; i <= 15; ++i) {
    EXPECT_EQ(!said[i - 1].empty(), i == 6) << "step " << i << ": " << said[i - 1];
  }
  EXPECT_NE(said[5].find("+1.00 MiB/step"), std::string::npos) << said[5];
  EXPECT_NE(said[5].find("reaches its cap of 1.00 GiB at step"), std::string::npos) << said[5];
  int fast = 0;
  for (int i = 16; i <= 25; ++i) fast += !said[i - 1].empty();
  EXPECT_GE(fast, 1);
  EXPECT_LE(fast, 5);
  for (int i = 22; i <= 25; ++i) EXPECT_EQ(said[i - 1], "") << "step " << i;
}

// Something kept every tenth step: 32 step ends hold three rises, too few to call; the
// coarse series over the whole run shows the leak, and the dying process says so.
TEST(OomVerdictTest, ProfileModeLeakEveryTenthStepIsALeak) {
  FakeTorchDevice torch{6};
  ASSERT_EQ(gpumem_trace_capacity(6, 1024 * kMiB, 3), 0);
  const std::uint32_t kept = SiteStack("stairs.py", 21, "sample");
  for (int step = 0; step < 300; ++step) {
    const std::uint64_t out = torch.Alloc(2 * kMiB, kept);
    StepPrinting();  // its warnings are not this test's
    if (step % 10 != 0) torch.Free(out);
  }
  const gpumem_oom_figures_t f = Figures(1000 * kMiB, 70 * kMiB, 10 * kMiB);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_explain_oom(6, &f), 0);  // a leak
  const std::string err = ::testing::internal::GetCapturedStderr();
  // 2 MiB every tenth step: about 205 KiB a step, fitted to the staircase (the figure
  // moves a little with where the samples fall on the stairs).
  const std::size_t site = err.find(" KiB/step   stairs.py:21 sample");
  ASSERT_NE(site, std::string::npos) << err;
  const std::size_t plus = err.rfind('+', site);
  ASSERT_NE(plus, std::string::npos) << err;
  EXPECT_NEAR(std::stod(err.substr(plus + 1, site - plus - 1)), 204.8, 5.0) << err;
}

// A history grown with torch.cat after each step: a new copy 1 MiB longer, the old one
// freed; one copy live at any time, made in the step. Warned of, and a leak at the OOM.
TEST(OomVerdictTest, ProfileModeHistoryGrownByConcatenationIsALeak) {
  FakeTorchDevice torch{7};
  ASSERT_EQ(gpumem_trace_capacity(7, 1024 * kMiB, 3), 0);
  const std::uint32_t log = SiteStack("concat.py", 30, "log");
  std::uint64_t history = 0;
  std::string err;
  for (int step = 1; step <= 40; ++step) {
    err += StepPrinting();
    const std::uint64_t longer = torch.Alloc(step * kMiB, log);
    if (history != 0) torch.Free(history);
    history = longer;
  }
  EXPECT_EQ(Count(err, "concat.py:30 log grew"), 1) << err;
  const gpumem_oom_figures_t f = Figures(1000 * kMiB, 60 * kMiB);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_explain_oom(7, &f), 0);  // a leak
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("+1.00 MiB/step     concat.py:30 log"), std::string::npos) << err;
}

// Batches of varying length, a slice of each output kept (the whole output with it):
// the rate, and the step it projects, wobble from step to step. Said a few times a run,
// each time later than the last, not every few steps.
TEST(OomVerdictTest, WobblingRateIsSaidAFewTimesNotEveryFewSteps) {
  FakeTorchDevice torch{10};
  ASSERT_EQ(gpumem_trace_capacity(10, 2048 * kMiB, 3), 0);
  const std::uint32_t kept = SiteStack("wobble.py", 4, "keep");
  const std::uint32_t batch = SiteStack("wobble.py", 2, "load");
  std::string err;
  std::vector<int> said_at;
  std::uint32_t lcg = 1;
  for (int step = 1; step <= 300; ++step) {
    lcg = lcg * 1664525u + 1013904223u;
    const std::uint64_t length = 1 + (lcg >> 24) % 8;  // 1-8 MiB
    const std::uint64_t input = torch.Alloc(64 * length * kMiB / 8, batch);
    torch.Alloc(length * kMiB, kept);
    torch.Free(input);
    const std::string said = StepPrinting();
    if (Count(said, "wobble.py:4 keep grew") > 0) said_at.push_back(step);
    err += said;
  }
  ASSERT_FALSE(said_at.empty()) << err;
  EXPECT_LE(said_at.size(), 8u) << err;
  for (std::size_t i = 2; i < said_at.size(); ++i) {  // each gap at least the time before it
    EXPECT_GE(said_at[i] - said_at[i - 1], said_at[i - 1] - said_at[0]) << err;
  }
}

// `epochs` epochs of 40 steps, each followed by a validation pass of 16 step ends that
// gathers 4 MiB at `site` at each; every pass but the last gives it all back when it ends
// (the last too, if `last_gives_back`). Returns what was printed at the step ends.
std::string EpochsWithGatheringPasses(FakeTorchDevice& torch, std::uint32_t site, int epochs,
                                      bool last_gives_back) {
  std::string err;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int step = 0; step < 40; ++step) err += StepPrinting();
    std::vector<std::uint64_t> outputs;
    for (int call = 0; call < 16; ++call) {
      outputs.push_back(torch.Alloc(4 * kMiB, site));
      err += StepPrinting();
    }
    if (epoch + 1 < epochs || last_gives_back) {
      for (std::uint64_t output : outputs) torch.Free(output);
    }
  }
  return err;
}

// Epochs of 40 steps, each followed by a validation pass of 16 step ends that gathers
// 4 MiB at each and gives it all back when it ends: warned of at the first pass only,
// since each later pass refills what the one before gave back.
TEST(OomVerdictTest, PassThatGathersAndGivesBackIsWarnedOfOnceNotEachEpoch) {
  FakeTorchDevice torch{11};
  ASSERT_EQ(gpumem_trace_capacity(11, 2048 * kMiB, 3), 0);
  const std::string err =
      EpochsWithGatheringPasses(torch, SiteStack("validate.py", 7, "gather"), 5, true);
  EXPECT_EQ(Count(err, "validate.py:7 gather grew"), 1) << err;
}

// The same passes, and in the sixth one a request that fits the cap only without what
// the pass gathered: its rise refills what it gave back five times, so the dying process
// calls the OOM a genuine peak, not a leak of the pass's outputs.
TEST(OomVerdictTest, AnOomInsideAPassThatRefillsIsNoLeak) {
  FakeTorchDevice torch{12};
  ASSERT_EQ(gpumem_trace_capacity(12, 2048 * kMiB, 3), 0);
  EpochsWithGatheringPasses(torch, SiteStack("validate.py", 9, "gather"), 6, false);
  const gpumem_oom_figures_t f = Figures(2000 * kMiB, 80 * kMiB);
  ::testing::internal::CaptureStderr();
  gpumem_explain_oom(12, &f);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("device 12: out of memory: verdict: genuine peak"), std::string::npos)
      << err;
  EXPECT_NE(err.find("steady             validate.py:9 gather"), std::string::npos) << err;
}

// A leak that begins after 1,800 healthy steps and keeps 4 MiB every tenth step: at its
// OOM 300 steps later the dying process sees the staircase (its coarse series samples the
// site from its first step end, not at the run's stride by then) and calls it a leak.
TEST(OomVerdictTest, ALeakThatBeginsLateIsALeakAtItsOom) {
  FakeTorchDevice torch{13};
  ASSERT_EQ(gpumem_trace_capacity(13, 1024 * kMiB, 3), 0);
  const std::uint32_t late = SiteStack("generate.py", 14, "keep");
  for (int step = 0; step < 1800; ++step) StepPrinting();
  for (int step = 0; step < 300; ++step) {
    if (step % 10 == 0) torch.Alloc(4 * kMiB, late);
    StepPrinting();
  }
  // Fits without the 120 MiB kept.
  const gpumem_oom_figures_t f = Figures(950 * kMiB, 130 * kMiB);
  ::testing::internal::CaptureStderr();
  gpumem_explain_oom(13, &f);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("device 13: out of memory: verdict: leak"), std::string::npos) << err;
  EXPECT_NE(err.find("KiB/step   generate.py:14 keep"), std::string::npos) << err;
}

// 300 steps that each keep 5 MiB, then one request that fits beside everything but the
// whole leak: what the leak added is counted from where the site's coarse series saw it
// begin, not only over the last kSteps step ends (160 MiB, too little to explain it).
TEST(OomVerdictTest, ALeakThatRunsOutAtALargerRequestIsALeak) {
  FakeTorchDevice torch{14};
  ASSERT_EQ(gpumem_trace_capacity(14, 2048 * kMiB, 3), 0);
  const std::uint32_t kept = SiteStack("plot.py", 22, "keep");
  torch.Alloc(16 * kMiB, SiteStack("plot.py", 3, "build"));
  for (int step = 0; step < 300; ++step) {
    torch.Alloc(5 * kMiB, kept);
    StepPrinting();
  }
  // 300 MiB past the cap with the leak
  const gpumem_oom_figures_t f = Figures((2048 - 1516 + 300) * kMiB, 1516 * kMiB);
  ::testing::internal::CaptureStderr();
  gpumem_explain_oom(14, &f);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("device 14: out of memory: verdict: leak"), std::string::npos) << err;
  EXPECT_NE(err.find("+5.00 MiB/step     plot.py:22 keep"), std::string::npos) << err;
}

// Leaks that keep 4 MiB at random steps, one step in 20 on average (batches kept when
// they are skipped): at their OOM the dying process calls each a leak at its line,
// however the pauses fell.
TEST(OomVerdictTest, LeaksAtRandomStepsAreLeaksAtTheirOom) {
  for (int seed = 0; seed < 6; ++seed) {
    const int device = 20 + seed;
    FakeTorchDevice torch{device};
    ASSERT_EQ(gpumem_trace_capacity(device, 1024 * kMiB, 3), 0);
    const std::uint32_t kept = SiteStack("skip.py", 30 + seed, "keep");
    std::mt19937 random(static_cast<std::uint32_t>(seed + 1));
    std::uint64_t held = 0;
    for (int step = 0; step < 800; ++step) {
      if (random() % 20 == 0) {
        torch.Alloc(4 * kMiB, kept);
        held += 4 * kMiB;
      }
      StepPrinting();
    }
    // Fits without what was kept.
    const gpumem_oom_figures_t f = Figures(1000 * kMiB - held, held);
    ::testing::internal::CaptureStderr();
    gpumem_explain_oom(device, &f);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(absl::StrCat("device ", device, ": out of memory: verdict: leak")),
              std::string::npos) << "seed " << seed << ": " << err;
    EXPECT_NE(err.find(absl::StrCat("skip.py:", 30 + seed, " keep")), std::string::npos)
        << "seed " << seed << ": " << err;
  }
}

// A cache that fills for ten steps and then holds its size: warned of while it grows,
// and the warning withdrawn once, after it has held no more for 20 step ends.
TEST(OomVerdictTest, WarningWithdrawnWhenTheSiteStopsGrowing) {
  FakeTorchDevice torch{5};
  ASSERT_EQ(gpumem_trace_capacity(5, 1024 * kMiB, 3), 0);
  const std::uint32_t cache = SiteStack("cache.py", 9, "remember");
  std::string err;
  for (int step = 0; step < 40; ++step) {
    if (step < 10) torch.Alloc(2 * kMiB, cache);
    err += StepPrinting();
  }
  // Earlier tests' sites share the recorder: count this one's lines only.
  EXPECT_EQ(Count(err, "cache.py:9 remember grew"), 1) << err;
  EXPECT_EQ(Count(err, "cache.py:9 remember has held no more"), 1) << err;
  EXPECT_NE(err.find("cache.py:9 remember has held no more for the last 20 step ends (live "
                     "20.00 MiB)"),
            std::string::npos)
      << err;
}

// Outputs gathered for ten steps, then cleared (an epoch's end): the warning is withdrawn
// at that step end, saying the site gave its memory back, not that it filled up and
// stopped.
TEST(OomVerdictTest, WarningWithdrawnWhenTheSiteGivesItsMemoryBack) {
  FakeTorchDevice torch{34};
  ASSERT_EQ(gpumem_trace_capacity(34, 1024 * kMiB, 3), 0);
  const std::uint32_t outputs = SiteStack("epoch.py", 12, "training_step");
  std::vector<std::uint64_t> gathered;
  std::string err;
  for (int step = 0; step < 40; ++step) {
    if (step < 10) gathered.push_back(torch.Alloc(2 * kMiB, outputs));
    if (step == 10) {
      for (std::uint64_t addr : gathered) torch.Free(addr);
    }
    err += StepPrinting();
  }
  EXPECT_EQ(Count(err, "epoch.py:12 training_step grew"), 1) << err;
  // Earlier tests' sites share the recorder: this one's lines only. Warned of at the
  // seventh step end (five rises after the first two), withdrawn at the eleventh, the
  // first to see the outputs cleared.
  const auto step_of = [&](const std::string& line_end) {
    const std::size_t at = err.rfind("at step ", err.find(line_end));
    return std::stoull(err.substr(at + 8));
  };
  EXPECT_EQ(Count(err, "epoch.py:12 training_step fell back"), 1) << err;
  EXPECT_EQ(step_of(": epoch.py:12 training_step fell back"),
            step_of(": epoch.py:12 training_step grew") + 11 - 7)
      << err;
  EXPECT_NE(err.find("epoch.py:12 training_step fell back to 0 B from the 12.00 MiB it held "
                     "when warned of: memory given back, as a request's or an epoch's at its "
                     "end, is not a leak"),
            std::string::npos)
      << err;
}

// Something kept once an epoch (every 50 steps): never five rises in a row, so the
// coarse series warns of it, once its growth is plain, and is not withdrawn between
// epochs; a single jump (a copy of the weights made once) and a cache that fills and
// stops are not warned of in steps.
TEST(OomVerdictTest, LeakOnceAnEpochIsWarnedOfInSteps) {
  FakeTorchDevice torch{9};
  ASSERT_EQ(gpumem_trace_capacity(9, 4096 * kMiB, 3), 0);
  const std::uint32_t epoch = SiteStack("epoch.py", 5, "snapshot");
  const std::uint32_t copy = SiteStack("ema.py", 8, "copy");
  const std::uint32_t cache = SiteStack("fill.py", 3, "remember");
  std::string err;
  int first_warned = 0;
  for (int step = 1; step <= 1000; ++step) {
    if (step % 50 == 0) torch.Alloc(16 * kMiB, epoch);
    if (step == 300) torch.Alloc(64 * kMiB, copy);
    if (step <= 40 && step % 4 == 0) torch.Alloc(2 * kMiB, cache);
    const std::string said = StepPrinting();
    if (first_warned == 0 && Count(said, "epoch.py:5 snapshot grew in steps") > 0) {
      first_warned = step;
    }
    err += said;
  }
  EXPECT_GT(first_warned, 0) << err;
  EXPECT_LE(first_warned, 600) << err;  // the coarse stride depends on earlier tests
  EXPECT_LE(Count(err, "epoch.py:5 snapshot grew in steps"), 4) << err;
  EXPECT_EQ(Count(err, "epoch.py:5 snapshot has held no more"), 0) << err;
  EXPECT_EQ(Count(err, "epoch.py:5 snapshot grew at each"), 0) << err;
  EXPECT_EQ(Count(err, "ema.py:8 copy grew"), 0) << err;
  EXPECT_EQ(Count(err, "fill.py:3 remember grew in steps"), 0) << err;
  // 16 MiB every 50 steps: about 328 KiB a step, as fitted to the staircase.
  const std::size_t line = err.find("epoch.py:5 snapshot grew in steps");
  const std::size_t plus = err.find(" step ends, +", line);
  ASSERT_NE(plus, std::string::npos) << err;
  const double rate = std::strtod(err.c_str() + plus + 13, nullptr);
  EXPECT_NEAR(rate, 16.0 * 1024 / 50, 16.0) << err.substr(line, 160);
  EXPECT_EQ(err.compare(err.find_first_not_of("0123456789.", plus + 13), 9, " KiB/step"), 0)
      << err.substr(line, 160);
}

// A gradient kept by a backward hook: allocated by a C++ backward node, on a thread with
// no Python frames. The warning and the verdict name the forward line whose op made the
// node, as the report does, not "<no stack recorded>".
TEST(OomVerdictTest, ProfileModeBackwardLeakNamesItsForwardLine) {
  FakeTorchDevice torch{8};
  ASSERT_EQ(gpumem_trace_capacity(8, 1024 * kMiB, 3), 0);
  const std::uint32_t forward = SiteStack("hook.py", 12, "train");
  const std::uint32_t relu_backward = gpumem_autograd_node_frame("ReluBackward0");
  std::string err;
  for (std::uint64_t step = 1; step <= 12; ++step) {
    const std::uint64_t seq = 100 * step;  // the ReLU's node takes seq; its output seq + 1
    gpumem_set_autograd_link(seq + 1, 1, 0);
    const std::uint64_t activation = torch.Alloc(4 * kMiB, forward);
    gpumem_set_autograd_link(seq, 1, relu_backward);
    torch.Alloc(2 * kMiB, 0);  // the gradient the hook keeps
    torch.Free(activation);
    err += StepPrinting();
  }
  EXPECT_NE(err.find("leak warning at step"), std::string::npos) << err;
  EXPECT_NE(err.find("hook.py:12 train grew"), std::string::npos) << err;
  EXPECT_EQ(err.find("<no stack recorded> grew"), std::string::npos) << err;
}

// An episode of 20 calls of a policy on device `device` (a 256 MiB cap), each keeping
// 9 MiB of graph for the backward pass at the episode's end, every step so far marked by
// a call awaiting the first backward pass; then an OOM with `figures`. What was said and
// the verdict.
std::string EpisodeTooLarge(int device, const gpumem_oom_figures_t& figures, int* verdict) {
  FakeTorchDevice torch{device};
  EXPECT_EQ(gpumem_trace_capacity(device, 256 * kMiB, 3), 0);
  const std::uint32_t action = SiteStack("rl.py", 30, "rollout");
  torch.Alloc(20 * kMiB, SiteStack("rl.py", 5, "policy"));
  EXPECT_EQ(gpumem_trace_step_source(6), 0);
  std::string err;
  for (int call = 0; call < 20; ++call) {
    torch.Alloc(9 * kMiB, action);
    if (call > 0) err += StepPrinting();
  }
  ::testing::internal::CaptureStderr();
  *verdict = gpumem_explain_oom(device, &figures);
  err += ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(gpumem_trace_step_source(0), 0);
  StepPrinting();  // the live view too leaves the calls' source, for the tests after this
  return err;
}

// No warning at those calls, and the OOM is a genuine peak of the first iteration, with
// the fix for an iteration too large.
TEST(OomVerdictTest, AnOomBeforeTheFirstBackwardPassIsTheFirstIterationsPeak) {
  const gpumem_oom_figures_t f = Figures(60 * kMiB, 210 * kMiB, 0);
  int verdict = -1;
  const std::string err = EpisodeTooLarge(15, f, &verdict);
  EXPECT_EQ(verdict, 2);  // a genuine peak
  EXPECT_EQ(err.find("leak warning"), std::string::npos) << err;
  EXPECT_NE(err.find("device 15: out of memory: verdict: genuine peak"), std::string::npos) << err;
  EXPECT_NE(err.find("no iteration had finished: the model was called 20 times with grad"),
            std::string::npos) << err;
  EXPECT_NE(err.find("gpumem:   iteration: One iteration here is every call of the model"),
            std::string::npos) << err;
  EXPECT_NE(err.find("+9.00 MiB/call"), std::string::npos) << err;
}

// PyTorch's own allocator may fail such an episode while it caches more than the request
// in pieces too small: those pieces only brought the end a few calls closer, and the
// iteration is still too large.
TEST(OomVerdictTest, AnIterationTooLargeIsItsPeakWhateverWasCutIntoPieces) {
  gpumem_oom_figures_t f = Figures(20 * kMiB, 240 * kMiB);  // 40 MiB cached free
  f.largest_free_bytes = 8 * kMiB;
  f.driver_free_bytes = 0;
  int verdict = -1;
  const std::string err = EpisodeTooLarge(17, f, &verdict);
  EXPECT_EQ(verdict, 2) << err;  // a genuine peak, not fragmentation
  EXPECT_NE(err.find("device 17: out of memory: verdict: genuine peak"), std::string::npos) << err;
  EXPECT_NE(err.find("gpumem:   iteration: One iteration here"), std::string::npos) << err;
}

// A batch-size finder's attempts before any backward pass: each call's memory freed when
// it failed, nothing held more from call to call. Not an iteration of many calls.
TEST(OomVerdictTest, AFindersAttemptsBeforeAnyBackwardPassAreNoIteration) {
  FakeTorchDevice torch{16};
  ASSERT_EQ(gpumem_trace_capacity(16, 256 * kMiB, 3), 0);
  const std::uint32_t attempt = SiteStack("finder.py", 12, "fits");
  torch.Alloc(20 * kMiB, SiteStack("finder.py", 3, "build"));
  ASSERT_EQ(gpumem_trace_step_source(6), 0);
  for (int call = 0; call < 8; ++call) {
    torch.Free(torch.Alloc((8 << call) * kMiB / 8, attempt));
    if (call > 0) StepPrinting();
  }
  const gpumem_oom_figures_t f = Figures(300 * kMiB, 150 * kMiB, 0);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_explain_oom(16, &f), 2);  // a genuine peak
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(gpumem_trace_step_source(0), 0);
  StepPrinting();
  EXPECT_EQ(err.find("iteration"), std::string::npos) << err;
}

// A stack of two frames, innermost first: a library's, then the user's site.
std::uint32_t LibraryStack(const char* library_file, const char* library_function,
                           const char* file, int line) {
  TraceWriter& writer = TraceRecorder()->writer();
  const RawFrame frames[] = {
      {writer.stacks().InternNamedFrame(format::FrameKind::kPython, library_function,
                                        library_file, 129),
       0, RawFrame::kNamedTag},
      {writer.stacks().InternNamedFrame(format::FrameKind::kPython, "<module>", file, line), 0,
       RawFrame::kNamedTag}};
  return writer.stacks().Intern(frames, 2);
}
constexpr char kTrainerUtils[] = "/venv/site-packages/transformers/trainer_pt_utils.py";

// Hugging Face's evaluation loop concatenating every batch's logits: the growing site is
// the user's evaluate() line, kept by the Trainer, and the fix is the Trainer's setting.
TEST(OomVerdictTest, ProfileModeLeakInsideALibraryThatKeepsNamesItsSetting) {
  FakeTorchDevice torch{30};
  ASSERT_EQ(gpumem_trace_capacity(30, 256 * kMiB, 3), 0);
  const std::uint32_t kept = LibraryStack(kTrainerUtils, "nested_concat", "eval.py", 30);
  std::uint64_t held = 0, held_bytes = 0;
  ::testing::internal::CaptureStderr();
  for (int batch = 0; batch < 12; ++batch) {
    const std::uint64_t joined = torch.Alloc(held_bytes + 4 * kMiB, kept);
    if (held != 0) torch.Free(held);
    held = joined;
    held_bytes += 4 * kMiB;
    gpumem_step();
  }
  const gpumem_oom_figures_t f = Figures(220 * kMiB, 60 * kMiB, 10 * kMiB);
  EXPECT_EQ(gpumem_explain_oom(30, &f), 0);  // a leak
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(": eval.py:30 <module>, kept by Hugging Face's Trainer (its evaluation "
                     "loop), grew at each of the last 5 step ends"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("+4.00 MiB/step     eval.py:30 <module>, kept by Hugging Face's Trainer"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("fix: Hugging Face's Trainer keeps every evaluation batch's logits"),
            std::string::npos)
      << err;
}

// Too soon for growth: the request that failed was the Trainer's concatenation.
TEST(OomVerdictTest, ProfileModePeakRequestedByALibraryThatKeepsSaysSoFirst) {
  FakeTorchDevice torch{31};
  ASSERT_EQ(gpumem_trace_capacity(31, 256 * kMiB, 3), 0);
  const std::uint32_t kept = LibraryStack(kTrainerUtils, "nested_concat", "eval.py", 30);
  torch.Alloc(100 * kMiB, kept);
  gpumem_step();
  gpumem_record_event(GPUMEM_EVENT_OOM, 31, 0, 200 * kMiB, 0, kept, 10 * kMiB);
  const gpumem_oom_figures_t f = Figures(200 * kMiB, 100 * kMiB, 10 * kMiB);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_explain_oom(31, &f), 2);  // a genuine peak
  // A later step's verdict on the device, of a request made elsewhere, says nothing of it.
  gpumem_step();
  EXPECT_EQ(gpumem_explain_oom(31, &f), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(err, "verdict: genuine peak"), 2) << err;
  EXPECT_EQ(Count(err, "fix: The request that failed was made by Hugging Face's Trainer"), 1)
      << err;
}

// A metric never reset: its update keeps a copy of every step's predictions, and its
// compute() concatenates them; that request fails. It would not have fit even without the
// growth, but the library that keeps the growth made it for what it keeps: a leak, and its
// fix.
TEST(OomVerdictTest, ProfileModeRequestOfTheLibraryKeepingTheGrowthIsALeak) {
  FakeTorchDevice torch{32};
  ASSERT_EQ(gpumem_trace_capacity(32, 256 * kMiB, 3), 0);
  constexpr char kMetrics[] = "/venv/site-packages/torchmetrics/classification/auroc.py";
  const std::uint32_t update = LibraryStack(kMetrics, "MultilabelAUROC.update", "fit.py", 40);
  const std::uint32_t compute = LibraryStack(kMetrics, "MultilabelAUROC.compute", "fit.py", 42);
  torch.Alloc(60 * kMiB, SiteStack("fit.py", 10, "model"));
  for (int step = 0; step < 12; ++step) {
    torch.Alloc(4 * kMiB, update);
    gpumem_step();
  }
  // Live: 60 + 48 (44 grown since the first sample); 108 + 160 needs more than 256 - 44.
  torch.Alloc(40 * kMiB, compute);
  gpumem_record_event(GPUMEM_EVENT_OOM, 32, 0, 160 * kMiB, 0, compute, 10 * kMiB);
  const gpumem_oom_figures_t f = Figures(160 * kMiB, 150 * kMiB, 10 * kMiB);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(gpumem_explain_oom(32, &f), 0);  // a leak
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("was made by a torchmetrics metric (its list states) for what it keeps"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("fix: A torchmetrics metric that keeps its inputs"), std::string::npos)
      << err;
}

// What marks the steps, as the Python package says it: the six sources and 0, nothing
// else.
TEST(StepSourceTest, TheCApiTakesTheKnownSourcesOnly) {
  for (int source = 0; source <= 6; ++source) EXPECT_EQ(gpumem_trace_step_source(source), 0);
  EXPECT_EQ(gpumem_trace_step_source(7), -1);
  EXPECT_EQ(gpumem_trace_step_source(-1), -1);
  EXPECT_EQ(gpumem_trace_step_source(0), 0);
}

}  // namespace
}  // namespace gpumem::hooks
