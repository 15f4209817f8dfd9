// Synthetic traces with a known cause of OOM are classified right, with figures that
// follow from how each trace was built (see synthetic.h).
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "profiler/package_notes.h"
#include "profiler/trace_format.h"
#include "tools/report/json_report.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/report/synthetic_builder.h"
#include "tools/report/terminal_report.h"

namespace gpumem::report {
namespace {

using synthetic::kCapacity;
using synthetic::kMiB;

TEST(SyntheticOom, LeakIsALeak) {
  trace::Trace t = synthetic::LeakTrace();
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.method, StepMethod::kStepEvents);
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  EXPECT_EQ(r.leaks.suspects[0].name, "train.py:42 train_step");
  EXPECT_DOUBLE_EQ(r.leaks.suspects[0].bytes_per_step, static_cast<double>(synthetic::kLeakPerStep));
  // Reserved starts at 384 MiB and grows 16 MiB a step: full after 40 steps, so the
  // request in step 41 fails.
  EXPECT_EQ(r.ooms[0].at.step + 1, 41u);
  EXPECT_EQ(r.ooms[0].at.request, 16 * kMiB);
  EXPECT_EQ(r.ooms[0].capacity, kCapacity);
  // The leak is what projected the OOM: the projection lands on the step it happened.
  ASSERT_TRUE(r.projected_oom_step.has_value());
  EXPECT_NEAR(static_cast<double>(*r.projected_oom_step), 40.0, 1.0);
}

// What held the device at the OOM that ended the run, by site, largest first: the leak
// (40 steps of 16 MiB), the step's activations, the parameters.
TEST(SyntheticOom, TheOomThatEndedTheRunListsWhatHeldItsDevice) {
  trace::Trace t = synthetic::LeakTrace();
  Report r = BuildReport(t, {});
  ASSERT_TRUE(r.fatal_oom.has_value());
  const nlohmann::json live = ReportToJson(r)["ooms"][*r.fatal_oom]["largest_live_sites"];
  ASSERT_EQ(live.size(), 3u) << live;
  EXPECT_EQ(live[0]["site"], "train.py:42 train_step");
  EXPECT_EQ(live[0]["bytes"], 40 * synthetic::kLeakPerStep);
  EXPECT_EQ(live[1]["site"], "train.py:40 train_step");
  EXPECT_EQ(live[1]["bytes"], 256 * kMiB);
  EXPECT_EQ(live[2]["site"], "train.py:10 build_model");
  const std::string text = FormatTerminal(r, false);
  EXPECT_NE(text.find("Live on device 0 at it, by site (1.00 GiB allocated):\n"
                      "    640.00 MiB   train.py:42 train_step\n"),
            std::string::npos)
      << text;
}

// Calls of a policy, each keeping its graph (16 MiB) for one backward pass that never
// comes before the OOM; every step marked by `source`. Without `keep`, each call's memory
// is freed before the next (a batch-size finder's attempts), and the OOM is a request of
// the whole device.
trace::Trace CallsThatKeepTheirGraphs(trace::StepSource source, bool keep = true) {
  constexpr std::uint64_t kBase = 0x7f0000000000ull;
  synthetic::Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t call = b.Stack(30, "rollout");
  b.Segment(kBase, 128 * kMiB);
  b.Alloc(kBase, 128 * kMiB, params);
  std::uint64_t next = kBase + 128 * kMiB;
  for (int calls = 1;; ++calls) {
    if (next + 16 * kMiB > kBase + kCapacity || (!keep && calls == 10)) {
      b.Oom(keep ? 16 * kMiB : kCapacity, 0);
      break;
    }
    b.Segment(next, 16 * kMiB);
    b.Alloc(next, 16 * kMiB, call);
    if (keep) {
      next += 16 * kMiB;
    } else {
      b.Free(next, 16 * kMiB, call);
    }
    if (calls > 1) b.Step(source);  // the first call marks nothing
  }
  return b.Take();
}

// Marked by calls awaiting the first backward pass, the OOM came in the first iteration:
// a genuine peak with the fix for an iteration too large. The same trace marked by plain
// model calls (an evaluation script that keeps its outputs) is a leak.
TEST(SyntheticOom, AnOomBeforeTheFirstBackwardPassIsTheFirstIterationsPeak) {
  trace::Trace t = CallsThatKeepTheirGraphs(trace::StepSource::kModelCallAwaitingBackward);
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.first_iteration_marks, r.steps.count);
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cls, OomClass::kPeak) << x.evidence;
  EXPECT_EQ(x.first_iteration_calls, r.steps.count + 1);
  EXPECT_NE(x.evidence.find("no iteration had finished: the model was called"),
            std::string::npos) << x.evidence;
  EXPECT_NE(x.fix.find("One iteration here is every call of the model"), std::string::npos);
  EXPECT_NE(Verdict(r).find(absl::StrCat("out of memory in the first iteration, at call ",
                                         r.steps.count + 1, " of the model: a genuine peak")),
            std::string::npos) << Verdict(r);

  trace::Trace plain = CallsThatKeepTheirGraphs(trace::StepSource::kModelCall);
  Report leak = BuildReport(plain, {});
  ASSERT_EQ(leak.ooms.size(), 1u);
  EXPECT_EQ(leak.ooms[0].cls, OomClass::kLeak) << leak.ooms[0].evidence;
  EXPECT_EQ(leak.ooms[0].first_iteration_calls, 0u);

  trace::Trace finder =
      CallsThatKeepTheirGraphs(trace::StepSource::kModelCallAwaitingBackward, /*keep=*/false);
  Report attempts = BuildReport(finder, {});
  ASSERT_EQ(attempts.ooms.size(), 1u);
  EXPECT_EQ(attempts.ooms[0].cls, OomClass::kPeak) << attempts.ooms[0].evidence;
  EXPECT_EQ(attempts.ooms[0].first_iteration_calls, 0u) << attempts.ooms[0].evidence;
}

// A leak whose last 8 steps each catch 30 OOMs (cuDNN trying smaller workspaces) before
// the one that ends the run. Each is the leak's, the last above all, though the report
// keeps the live bytes by site of only the first and the latest OOMs.
TEST(SyntheticOom, EveryOomOfAStormIsTheLeaksTheLastAboveAll) {
  constexpr std::uint64_t kBase = 0x7f0000000000ull;
  synthetic::Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t leak = b.Stack(42, "train_step");
  b.Segment(kBase, 128 * kMiB);
  b.Alloc(kBase, 128 * kMiB, params);
  std::uint64_t next = kBase + 128 * kMiB;
  while (next + synthetic::kLeakPerStep <= kBase + kCapacity) {
    b.Segment(next, synthetic::kLeakPerStep);
    b.Alloc(next, synthetic::kLeakPerStep, leak);
    next += synthetic::kLeakPerStep;
    if (kBase + kCapacity - next < 128 * kMiB) {
      for (int i = 0; i < 30; ++i) b.Oom((256 - i) * kMiB, 0);
    }
    b.Step();
  }
  b.Oom(synthetic::kLeakPerStep, 0);
  trace::Trace t = b.Take();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 8u * 30 + 1);
  ASSERT_EQ(r.fatal_oom, r.ooms.size() - 1);
  for (const OomExplanation& x : r.ooms) {
    EXPECT_EQ(x.cls, OomClass::kLeak) << "step " << x.at.step + 1 << ": " << x.evidence;
    EXPECT_GT(x.leaked_bytes, 512 * kMiB) << "step " << x.at.step + 1;
  }
  EXPECT_TRUE(r.ooms[120].at.site_live.empty());  // given up: between the first and the latest
  EXPECT_FALSE(r.ooms.back().at.site_live.empty());
}

TEST(SyntheticOom, FragmentationIsFragmentation) {
  trace::Trace t = synthetic::FragmentationTrace();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cls, OomClass::kFragmentation) << x.evidence;
  EXPECT_TRUE(r.leaks.suspects.empty());
  EXPECT_EQ(x.free_cached, 256 * kMiB);  // every other 16 MiB block of 512 MiB
  EXPECT_EQ(x.at.largest_free_piece, 16 * kMiB);
  EXPECT_EQ(x.at.request, 128 * kMiB);
  ASSERT_TRUE(x.replay.has_value());
  EXPECT_TRUE(x.replay->ran) << x.replay->error;
}

TEST(SyntheticOom, PeakIsAPeak) {
  trace::Trace t = synthetic::PeakTrace();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cls, OomClass::kPeak) << x.evidence;
  EXPECT_TRUE(r.leaks.suspects.empty());
  EXPECT_EQ(x.at.step + 1, 11u);
  EXPECT_EQ(x.at.allocated, kCapacity);  // 256 MiB + 12 x 64 MiB
  EXPECT_EQ(x.free_cached, 0u);
  EXPECT_FALSE(r.projected_oom_step.has_value());
}

// A CUDA graph captured each epoch and kept: each keeps its pool's 128 MiB segment after
// its blocks are freed. A 64 MiB request fails with 768 MiB free in 128 MiB pieces and
// allocated far under the cap: the free memory was not the request's to use.
TEST(SyntheticOom, FreeMemoryInPiecesLargeEnoughWasHeldApart) {
  synthetic::Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t captured = b.Stack(40, "capture");
  constexpr std::uint64_t kBase = 0x7f0000000000ull;
  b.Segment(kBase, 128 * kMiB);
  b.Alloc(kBase, 128 * kMiB, params);
  for (std::uint64_t epoch = 1; epoch <= 6; ++epoch) {
    const std::uint64_t pool = kBase + epoch * 256 * kMiB;  // apart: no piece spans two
    b.Segment(pool, 128 * kMiB);
    b.Alloc(pool, 128 * kMiB, captured);
    b.Free(pool, 128 * kMiB, captured);
    b.Step();
  }
  b.Oom(64 * kMiB, 128 * kMiB);
  trace::Trace t = b.Take();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cls, OomClass::kHeldApart) << x.evidence;
  EXPECT_EQ(x.free_cached, 768 * kMiB);
  EXPECT_EQ(x.at.largest_free_piece, 128 * kMiB);
  EXPECT_NE(x.fix.find("pool=first_graph.pool()"), std::string::npos) << x.fix;
  EXPECT_NE(ReportToJson(r).dump().find("free memory held apart"), std::string::npos);
}

TEST(SyntheticOom, DyingBeforeAnyStepSaysSoInsteadOfAskingForSteps) {
  trace::Trace t = synthetic::PeakTrace();
  std::erase_if(t.events, [](const trace::Event& e) { return e.action == trace::Action::kStep; });
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.steps.method, StepMethod::kNone);
  ASSERT_TRUE(r.fatal_oom.has_value());
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings.back().find("the run died of memory before any step ended"),
            std::string::npos)
      << r.warnings.back();

  std::erase_if(t.events, [](const trace::Event& e) { return e.action == trace::Action::kOom; });
  r = BuildReport(t, {});
  ASSERT_FALSE(r.fatal_oom.has_value());
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings.back().find("try --step-site FILE:LINE"), std::string::npos)
      << r.warnings.back();
}

// k-means written in plain tensor operations: no step marks, no backward. Each pass
// allocates its distances and frees them, and keeps 800 KB; the report finds the passes
// (each frees most of what it allocates) and names the kept line as a leak.
TEST(SyntheticOom, ALoopOfPlainTensorOperationsHasItsPassesFoundAndItsLeakNamed) {
  synthetic::Builder b;
  auto site = [&](int line) { return b.Stack({{"kmeans.py", line, "kmeans"}}); };
  const std::uint32_t points = site(5), distances = site(10), kept = site(11), sums = site(12);
  std::uint64_t addr = 0x7f0000000000ull;
  auto alloc = [&](std::uint64_t size, std::uint32_t stack) {
    b.Alloc(addr += 256 * kMiB, size, stack);
    return addr;
  };
  alloc(50 * kMiB, points);
  for (int pass = 0; pass < 200; ++pass) {
    const std::uint64_t d = alloc(200 * kMiB, distances);
    alloc(800'000, kept);
    const std::uint64_t s = alloc(64 << 10, sums);
    b.Free(d, 200 * kMiB, distances);
    b.Free(s, 64 << 10, sums);
  }
  const trace::Trace t = b.Take();
  const Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.method, StepMethod::kInferred) << r.steps.detail;
  EXPECT_EQ(r.steps.count, 200u);
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_EQ(r.leaks.suspects[0].name, "kmeans.py:11 kmeans");
  EXPECT_NEAR(r.leaks.suspects[0].bytes_per_step, 800'000.0, 512.0);  // a 512 B block's rounding
}

// What a helper thread (200) allocated in a run that dies before any step ends (pid 100).
enum class Helper {
  kQueueBesideTheLoop,   // a batch of 8 MiB a round, the main thread allocating between
  kQueueWhileCompiling,  // the same batches, most before the main thread allocates again
                         // and the rest one every ten of its allocations, the last after
  kQueueFullBeforeTheStep,  // the same batches, all before the main thread allocates
  kWeightsLoaded,        // a model's weights, of four sizes, before the main thread goes on
  kBackward,             // the batches of the first, on a thread that runs backward nodes
  kLoopOnItsOwnThread,   // the batches of the second, on a thread noted as the loop's
};

// The model's parameters, then 40 blocks that thread 200 allocates at one line, each in a
// 16 MiB segment of its own, and 40 activations of 4 MiB that the main thread allocates,
// each at a line of its own. A 128 MiB request fails with the segments' free pieces cached.
trace::Trace HelperThreadBlocks(Helper helper) {
  constexpr std::uint64_t kBase = 0x7f0000000000ull;
  constexpr std::uint64_t kWeightSizes[] = {8 * kMiB, 8 * kMiB, 2 * kMiB, 12 * kMiB};
  synthetic::Builder b;
  b.Pid(100);
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::vector<trace::Frame> backward_node = {
      {"<autograd>", 0, "MmBackward0 (backward)"}, {"train.py", 30, "load"}};
  std::uint32_t batch = b.Stack(30, "load");
  if (helper == Helper::kBackward) batch = b.RawStack(backward_node);
  b.Segment(kBase, 128 * kMiB);
  b.Alloc(kBase, 128 * kMiB, params);
  if (helper == Helper::kLoopOnItsOwnThread) b.Note(format::LoopThreadNoteText(200), -1);
  std::uint64_t next = kBase + 128 * kMiB;
  auto helper_block = [&](int round) {
    b.OnThread(200);
    b.Segment(next, 16 * kMiB);
    b.Alloc(next, helper == Helper::kWeightsLoaded ? kWeightSizes[round % 4] : 8 * kMiB, batch);
    next += 16 * kMiB;
    b.OnThread(100);
  };
  auto activation = [&](int round) {
    b.Segment(next, 4 * kMiB);
    b.Alloc(next, 4 * kMiB, b.Stack(50 + round, "forward"));
    next += 4 * kMiB;
  };
  const bool beside = helper == Helper::kQueueBesideTheLoop || helper == Helper::kBackward;
  const int still_filling = helper == Helper::kQueueWhileCompiling ? 4 : 0;
  for (int round = 0; round < 40 - still_filling; ++round) {
    helper_block(round);
    if (beside) activation(round);
  }
  for (int round = 0; !beside && round < 40; ++round) {
    activation(round);
    if (still_filling > 0 && round % 10 == 9) helper_block(round);
  }
  b.Oom(128 * kMiB, 0);
  return b.Take();
}

// A loader thread that filled a queue while the first step ran, or compiled: a leak at
// the queue's line, though no step had ended to show growth and the free memory was in
// pieces.
TEST(SyntheticOom, BlocksAHelperThreadQueuedAreALeakBeforeAnyStep) {
  for (const Helper helper : {Helper::kQueueBesideTheLoop, Helper::kQueueWhileCompiling}) {
    const trace::Trace t = HelperThreadBlocks(helper);
    const Report r = BuildReport(t, {});
    ASSERT_EQ(r.ooms.size(), 1u);
    const OomExplanation& x = r.ooms[0];
    EXPECT_EQ(x.cls, OomClass::kLeak) << x.evidence;
    EXPECT_EQ(x.at.helper_site, "train.py:30 load");
    EXPECT_EQ(x.at.helper_kept.blocks, 40u);
    EXPECT_EQ(x.at.helper_kept.bytes, 320 * kMiB);
    EXPECT_NE(x.evidence.find("a thread other than the loop's kept 40 blocks (320.00 MiB) "
                              "at train.py:30 load"),
              std::string::npos)
        << x.evidence;
    EXPECT_EQ(x.fix, kHelperKeptFix);
  }
}

// Weights a thread pool loaded while the main thread waited, batches of a bounded queue
// that was full before the step allocated half as much again, blocks of a thread that
// runs backward nodes, and a loop's own on a thread of its own (Ray Tune's trainables):
// the pieces are fragmentation, as before.
TEST(SyntheticOom, WeightsAPoolLoadedAFullQueueAndBackwardsBlocksAreNoLeak) {
  for (const Helper helper : {Helper::kWeightsLoaded, Helper::kQueueFullBeforeTheStep,
                              Helper::kBackward, Helper::kLoopOnItsOwnThread}) {
    const trace::Trace t = HelperThreadBlocks(helper);
    const Report r = BuildReport(t, {});
    ASSERT_EQ(r.ooms.size(), 1u);
    EXPECT_EQ(r.ooms[0].cls, OomClass::kFragmentation) << r.ooms[0].evidence;
    EXPECT_EQ(r.ooms[0].at.helper_site, "");
  }
}

// One process on two devices (a model split over two GPUs): a site on device 0 keeps 16
// MiB every step while device 1 holds a 512 MiB model and a step's 128 MiB. In step 31 a
// request of `request` bytes fails on `oom_device`.
trace::Trace LeakOnDeviceZeroOomOn(std::int32_t oom_device, std::uint64_t request) {
  constexpr std::uint64_t kBase = 0x7f0000000000ull;
  synthetic::Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t kept = b.Stack(42, "train_step");
  const std::uint32_t act = b.Stack(50, "forward");
  b.OnDevice(0);
  b.Segment(kBase, kCapacity);
  b.Alloc(kBase, 128 * kMiB, params);
  b.OnDevice(1);
  b.Segment(kBase, kCapacity);
  b.Alloc(kBase, 512 * kMiB, params);
  for (std::uint64_t step = 0; step < 30; ++step) {
    b.OnDevice(0);
    b.Alloc(kBase + (128 + 16 * step) * kMiB, 16 * kMiB, kept);
    b.OnDevice(1);
    b.Alloc(kBase + 512 * kMiB, 128 * kMiB, act);
    b.Free(kBase + 512 * kMiB, 128 * kMiB, act);
    b.OnDevice(0);
    b.Step();
  }
  b.OnDevice(oom_device);
  b.Oom(request, 0);
  return b.Take();
}

// What device 0 kept frees nothing on device 1: device 1's request that its model leaves
// no room for is a genuine peak there, and a request on device 0 that fits without the
// growth is the leak.
TEST(SyntheticOom, GrowthOnOneDeviceExplainsOnlyItsOwnOoms) {
  const trace::Trace on_other = LeakOnDeviceZeroOomOn(1, 600 * kMiB);
  Report other = BuildReport(on_other, {});
  ASSERT_EQ(other.leaks.suspects.size(), 1u);
  EXPECT_EQ(other.leaks.suspects[0].name, "train.py:42 train_step");
  ASSERT_EQ(other.ooms.size(), 1u);
  EXPECT_EQ(other.ooms[0].at.device, 1);
  EXPECT_EQ(other.ooms[0].leaked_bytes, 0u);
  EXPECT_EQ(other.ooms[0].cls, OomClass::kPeak) << other.ooms[0].evidence;

  const trace::Trace on_own = LeakOnDeviceZeroOomOn(0, 512 * kMiB);
  Report own = BuildReport(on_own, {});
  ASSERT_EQ(own.ooms.size(), 1u);
  EXPECT_EQ(own.ooms[0].cls, OomClass::kLeak) << own.ooms[0].evidence;
  EXPECT_GT(own.ooms[0].leaked_bytes, 400 * kMiB);
}

// The projection follows device 0's memory, where the leak is: 608 MiB at the end of
// step 30 plus 16 MiB a step reaches 1 GiB in step 56. Both devices together (1.22 GiB)
// would have put it in the past. The header and the JSON give each device's peaks.
TEST(SyntheticOom, ALeakOnOneDeviceIsProjectedOnThatDevice) {
  const trace::Trace t = LeakOnDeviceZeroOomOn(1, 600 * kMiB);  // the report points into it
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.timeline.DevicesUsed(), 2u);
  EXPECT_EQ(LeakDevice(r.timeline, r.leaks), 0);
  ASSERT_TRUE(r.projected_oom_step.has_value());
  EXPECT_EQ(*r.projected_oom_step + 1, 56u);
  EXPECT_NE(FormatTerminal(r, false).find("runs out of 1.00 GiB on device 0 in step 56"),
            std::string::npos) << FormatTerminal(r, false);
  const nlohmann::json j = ReportToJson(r);
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][1]["device"], 1);
  EXPECT_EQ(j["devices"][1]["peak_allocated"], 640 * kMiB);
  EXPECT_EQ(j["projected_oom_device"], 0);
}

TEST(SyntheticOom, JsonCarriesTheClassAndFigures) {
  trace::Trace t = synthetic::FragmentationTrace();
  nlohmann::json j = ReportToJson(BuildReport(t, {}));
  ASSERT_EQ(j["ooms"].size(), 1u);
  EXPECT_EQ(j["ooms"][0]["class"], "fragmentation");
  EXPECT_EQ(j["ooms"][0]["largest_free_piece"], 16 * kMiB);
  EXPECT_EQ(j["steps"]["method"], "step-events");
  EXPECT_TRUE(j["projected_oom_step"].is_null());
  EXPECT_TRUE(j["leak_suspects"].empty());
}

// A batch-size finder's caught OOM, 20 steps, then cuBLAS's workspace fails outside the
// allocator: the run died of that failure, and the finder's OOM is only recovered.
TEST(SyntheticOom, FailedOutsideCallAfterACaughtOomIsTheVerdict) {
  trace::Trace t = synthetic::FinderThenFailedCublasTrace();
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_TRUE(r.ooms[0].recovered);
  EXPECT_FALSE(r.ooms[0].fatal);
  EXPECT_FALSE(r.fatal_oom.has_value());
  EXPECT_EQ(r.recovered_ooms, 1u);
  ASSERT_EQ(r.failed_outside.size(), 1u);
  ASSERT_EQ(r.fatal_failed_outside, 0u);
  const FailedOutside& f = r.failed_outside[0];
  EXPECT_EQ(f.step + 1, 21u);
  EXPECT_EQ(f.idle, synthetic::kFinderIdle);
  EXPECT_EQ(f.error_name, "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(f.site, "train.py:77 validate");
  const std::string verdict = Verdict(r);
  EXPECT_NE(verdict.find("out of memory outside the allocator"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("cuMemAlloc of 32.00 MiB"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("448.00 MiB idle"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("1 OOM caught and recovered from"), std::string::npos) << verdict;
  const std::string text = FormatTerminal(r, false);
  EXPECT_NE(text.find("torch.cuda.empty_cache()"), std::string::npos) << text;
  EXPECT_NE(text.find("GPUMEM_HEADROOM"), std::string::npos) << text;
  EXPECT_EQ(text.find("did not die of an OOM"), std::string::npos) << text;
}

TEST(SyntheticOom, JsonListsFailedAllocations) {
  trace::Trace t = synthetic::FinderThenFailedCublasTrace();
  nlohmann::json j = ReportToJson(BuildReport(t, {}));
  ASSERT_EQ(j["failed_allocations"].size(), 1u);
  const nlohmann::json& f = j["failed_allocations"][0];
  EXPECT_EQ(f["call"], "cuMemAlloc");
  EXPECT_EQ(f["size"], synthetic::kCublasWorkspace);
  EXPECT_EQ(f["error_name"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(f["step"], 21);
  EXPECT_EQ(f["site"], "train.py:77 validate");
  EXPECT_EQ(f["idle_in_cache"], synthetic::kFinderIdle);
  EXPECT_TRUE(f["ended_the_run"].get<bool>());
  EXPECT_TRUE(j["fatal_oom"].is_null());
  EXPECT_TRUE(j["ooms"][0]["recovered"].get<bool>());
}

// A failure the program went on from (steps end after it) is listed, not the verdict.
TEST(SyntheticOom, FailedOutsideCallFollowedBySteps) {
  trace::Trace t = synthetic::FinderThenFailedCublasTrace();
  t.failed_allocations[0].time_us = t.events[t.events.size() / 2].time_us;
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.failed_outside.size(), 1u);
  EXPECT_FALSE(r.fatal_failed_outside.has_value());
  EXPECT_EQ(Verdict(r).find("outside the allocator"), std::string::npos);
  EXPECT_NE(FormatTerminal(r, false).find("Failed allocations outside the allocator"),
            std::string::npos);
}

// PyTorch's allocator asks the driver for its OOM's segment (a request of 127.5 MiB
// rounds to 128 MiB) before raising it, and CUPTI sees the calls: they are the OOM, not
// another library's failures. A library's own failed call just before it is still one.
constexpr std::uint64_t kLoadedBase = 0x7f0000000000ull;

// A model of 1 GiB loaded; returns the stack of the line that then trains.
std::uint32_t Loaded(synthetic::Builder& b) {
  b.Segment(kLoadedBase, 1024 * kMiB);
  b.Alloc(kLoadedBase, 1024 * kMiB, b.Stack(12, "load"));
  return b.Stack(62, "fit");
}

TEST(SyntheticOom, TheAllocatorsOwnDriverCallsBeforeItsOomAreNotAnotherLibrarys) {
  synthetic::Builder b;
  const std::uint32_t fit = Loaded(b);
  b.FailedAlloc("cuMemAlloc", 32 * kMiB, 2, 20 * kMiB, fit);
  b.FailedAlloc("cuMemAlloc", 128 * kMiB, 2, 20 * kMiB, fit);
  b.FailedAlloc("cuMemAlloc", 128 * kMiB, 2, 20 * kMiB, fit);
  b.Oom(127 * kMiB + 512 * 1024, 20 * kMiB);
  trace::Trace t = b.Take();
  const Report r = BuildReport(t, {});
  ASSERT_EQ(r.failed_outside.size(), 1u);
  EXPECT_EQ(r.failed_outside[0].call.size, 32 * kMiB);
  EXPECT_FALSE(r.failed_outside[0].ended_the_run);  // the allocator's OOM came after it
}

// Where the second call gets the segment (the cache freed was enough), no OOM follows:
// the refused call is the allocator's all the same.
TEST(SyntheticOom, TheAllocatorsRefusedCallBeforeItsSegmentIsNotAnotherLibrarys) {
  synthetic::Builder b;
  const std::uint32_t fit = Loaded(b);
  b.FailedAlloc("cuMemAlloc", 512 * kMiB, 2, 20 * kMiB, fit);
  b.Segment(kLoadedBase + 1024 * kMiB, 512 * kMiB);
  b.Alloc(kLoadedBase + 1024 * kMiB, 512 * kMiB, fit);
  b.FailedAlloc("cuMemAlloc", 256 * kMiB, 2, 20 * kMiB, fit);  // nothing of that size follows
  trace::Trace t = b.Take();
  const Report r = BuildReport(t, {});
  ASSERT_EQ(r.failed_outside.size(), 1u);
  EXPECT_EQ(r.failed_outside[0].call.size, 256 * kMiB);
}

// Where CUPTI saw no failed call (it was off, or NCCL's cuMem* calls), the library error
// the dying process named in its note is the verdict.
TEST(SyntheticOom, LibraryErrorNamedAtExitIsTheVerdict) {
  trace::Trace t = synthetic::FinderThenFailedCublasTrace();
  const std::int64_t end = t.failed_allocations[0].time_us;
  t.failed_allocations.clear();
  t.annotations.push_back({"gpumem: this is an out-of-memory: NCCL error (NCCL error in: "
                           "NCCLUtils.cpp:93, unhandled cuda error) is what a CUDA library "
                           "says when it cannot get device memory",
                           true, end, 0});
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.fatal_failed_outside, 0u);
  const std::string verdict = Verdict(r);
  EXPECT_NE(verdict.find("out of memory outside the allocator in step 21: NCCL error (size "
                         "not recorded) failed while the allocator held 448.00 MiB idle"),
            std::string::npos)
      << verdict;
  EXPECT_NE(verdict.find("1 OOM caught and recovered from"), std::string::npos) << verdict;
}

// A note in the middle of a run that went on is not the verdict.
TEST(SyntheticOom, LibraryErrorNoteFollowedByStepsIsNotTheVerdict) {
  trace::Trace t = synthetic::FinderThenFailedCublasTrace();
  const std::int64_t middle = t.events[t.events.size() / 2].time_us;
  t.failed_allocations.clear();
  t.annotations.push_back({"gpumem: this is an out-of-memory: CUBLAS_STATUS_ALLOC_FAILED (x)",
                           true, middle, 0});
  Report r = BuildReport(t, {});
  EXPECT_FALSE(r.fatal_failed_outside.has_value());
  EXPECT_EQ(Verdict(r).find("outside the allocator"), std::string::npos) << Verdict(r);
}

// Another thread went on stepping and allocating after the OOM while its error reached
// the top of the program: without the package's note the OOM reads as recovered; with
// it, it ended the run.
TEST(SyntheticOom, OomTheProgramSaidItDiedOfEndedTheRunThoughOthersWentOn) {
  trace::Trace t = synthetic::LeakTrace();
  std::int64_t time = t.events.back().time_us;
  for (int i = 0; i < 40; ++i) {
    trace::Event e;
    e.action = i % 10 == 9 ? trace::Action::kStep : trace::Action::kAlloc;
    e.addr = 0x7000'0000'0000 + static_cast<std::uint64_t>(i) * kMiB;
    e.size = e.action == trace::Action::kAlloc ? 4096 : 0;
    e.time_us = time += 10;
    t.events.push_back(e);
  }
  EXPECT_FALSE(BuildReport(t, {}).fatal_oom.has_value());
  t.annotations.push_back({absl::StrCat(format::kDiedOfOomNote, ": CUDA out of memory."), true,
                           time + 10, -1});
  const Report r = BuildReport(t, {});
  ASSERT_EQ(r.fatal_oom, 0u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
  EXPECT_EQ(r.recovered_ooms, 0u);
  EXPECT_EQ(Verdict(r).rfind("out of memory in step 41: leak", 0), 0u) << Verdict(r);
}

// The OOM came in a loader thread while the loop went on taking what the leak had queued
// (freeing one leaked block a step) before the error reached it: the leak is judged over
// the steps before the OOM that ended the run, not over the draining after it.
TEST(SyntheticOom, ALeakDrainedAfterTheOomThatEndedTheRunIsStillALeak) {
  trace::Trace t = synthetic::LeakTrace();
  constexpr std::uint64_t kFirstLeaked = 0x7f0000000000ull + 384 * kMiB;
  std::int64_t time = t.events.back().time_us;
  for (std::uint64_t i = 0; i < 40; ++i) {
    for (const trace::Action action : {trace::Action::kFreeRequested,
                                       trace::Action::kFreeCompleted, trace::Action::kStep}) {
      trace::Event e;
      e.action = action;
      if (action != trace::Action::kStep) {
        e.addr = kFirstLeaked + i * synthetic::kLeakPerStep;
        e.size = synthetic::kLeakPerStep;
      }
      e.time_us = time += 10;
      t.events.push_back(e);
    }
  }
  t.annotations.push_back({absl::StrCat(format::kDiedOfOomNote, ": CUDA out of memory."), true,
                           time + 10, -1});
  const Report r = BuildReport(t, {});
  ASSERT_EQ(r.fatal_oom, 0u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kLeak) << r.ooms[0].evidence;
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_EQ(r.leaks.suspects[0].name, "train.py:42 train_step");
  EXPECT_EQ(Verdict(r).rfind("out of memory in step 41: leak", 0), 0u) << Verdict(r);
}

}  // namespace
}  // namespace gpumem::report
