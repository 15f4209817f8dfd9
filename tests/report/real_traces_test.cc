// The report on the real traces in tests/data: the leaky run's top suspect is its leak,
// with the growth the trace itself shows; the healthy runs have no suspects.
#include <string>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "tools/report/json_report.h"
#include "tools/report/outside_format.h"
#include "tools/report/rank_summary.h"
#include "tools/report/report.h"
#include "tools/report/verdict_rules.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {

using trace::Action;

trace::Trace Load(const std::string& name) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/" + name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : trace::Trace();
}

// A run's trace and the CUPTI tracer's beside it ("NAME.gpumem.xz", "NAME.cupti.gpumem.xz").
struct WithCupti {
  trace::Trace main;
  trace::Trace cupti;
  explicit WithCupti(const std::string& name)
      : main(Load(name + ".gpumem.xz")), cupti(Load(name + ".cupti.gpumem.xz")) {}
  Report Build() const {
    ReportOptions options;
    options.cupti = &cupti;
    return BuildReport(main, options);
  }
};

bool HasFrame(const trace::Trace& t, std::uint32_t stack, const std::string& file, int line) {
  for (std::uint32_t f : t.stacks[stack]) {
    if (t.frames[f].filename == file && t.frames[f].line == line) return true;
  }
  return false;
}

// Independent of the report's code: capture.py's loop starts each step with
// `x = torch.randn(...)` at line 77 and runs the model at line 78. Walk the events with a
// plain map, take the live bytes allocated by line 78 (innermost capture.py frame) each
// time line 77 allocates, and return the average growth between consecutive steps.
double IndependentGrowthOfLine78(const trace::Trace& t, std::size_t* steps) {
  absl::flat_hash_map<std::uint64_t, std::uint64_t> live_78;  // addr -> size
  std::uint64_t bytes_78 = 0;
  std::vector<std::uint64_t> at_step_start;
  for (const trace::Event& e : t.events) {
    const bool from_78 = HasFrame(t, e.stack_id, "capture.py", 78) &&
                         !HasFrame(t, e.stack_id, "capture.py", 77);
    if (e.action == Action::kAlloc) {
      if (HasFrame(t, e.stack_id, "capture.py", 77)) at_step_start.push_back(bytes_78);
      if (from_78) {
        live_78[e.addr] = e.size;
        bytes_78 += e.size;
      }
    } else if (e.action == Action::kFreeCompleted) {
      auto it = live_78.find(e.addr);
      if (it != live_78.end()) {
        bytes_78 -= it->second;
        live_78.erase(it);
      }
    }
  }
  *steps = at_step_start.size();
  if (at_step_start.size() < 3) return 0;
  // From the start of step 2 to the start of the last step.
  return static_cast<double>(at_step_start.back() - at_step_start[1]) /
         static_cast<double>(at_step_start.size() - 2);
}

TEST(RealTraces, LeakyMlpTopSuspectIsTheKeptLoss) {
  trace::Trace t = Load("leaky_mlp.trace.tsv.gz");
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.count, 60u);  // capture.py runs 60 steps
  EXPECT_EQ(r.steps.method, StepMethod::kInferred);
  ASSERT_FALSE(r.leaks.suspects.empty());
  const LeakSuspect& top = r.leaks.suspects.front();
  EXPECT_EQ(top.name, "capture.py:78 leaky_mlp");  // `loss = m(x).pow(2).mean()`, kept
  std::size_t steps = 0;
  const double growth = IndependentGrowthOfLine78(t, &steps);
  EXPECT_EQ(steps, 60u);
  ASSERT_GT(growth, 0);
  EXPECT_NEAR(top.bytes_per_step, growth, growth * 0.01);
  EXPECT_GT(top.r2, 0.99);
  EXPECT_EQ(top.first_step, 0u);
}

TEST(RealTraces, LeakyMlpProjectsAnOomUnderASmallCapacity) {
  trace::Trace t = Load("leaky_mlp.trace.tsv.gz");
  ReportOptions options;
  options.capacity = 1ull << 30;  // 1 GiB: the run peaked near 0.5 GiB, growing ~6 MiB/step
  Report r = BuildReport(t, options);
  ASSERT_TRUE(r.projected_oom_step.has_value());
  // Independent bound: from the peak in the last step, (1 GiB - peak) / growth more steps.
  const double per_step = r.leaks.bytes_per_step;
  const double peak = static_cast<double>(r.timeline.peak_allocated);
  const double expected = 59 + ((1ull << 30) - peak) / per_step;
  EXPECT_NEAR(static_cast<double>(*r.projected_oom_step), expected, 2.0);
}

class HealthyRun : public ::testing::TestWithParam<std::pair<const char*, std::size_t>> {};

TEST_P(HealthyRun, NoLeakSuspects) {
  trace::Trace t = Load(GetParam().first);
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.count, GetParam().second);  // the step counts of capture.py
  EXPECT_GE(r.leaks.samples_used, 4u);
  for (const LeakSuspect& s : r.leaks.suspects) {
    ADD_FAILURE() << "false leak suspect " << s.name << " " << s.bytes_per_step << " B/step";
  }
  EXPECT_FALSE(r.projected_oom_step.has_value());
}

INSTANTIATE_TEST_SUITE_P(Traces, HealthyRun,
                         ::testing::Values(std::make_pair("gpt2.trace.tsv.gz", 12),
                                           std::make_pair("resnet50.trace.tsv.gz", 12),
                                           std::make_pair("varlen_bert.trace.tsv.gz", 40),
                                           // Pickles: steps from Optimizer annotations
                                           // (resnet50's GradScaler skips some steps, so
                                           // its zero_grad ends mark them).
                                           std::make_pair("gpt2.pickle.xz", 12),
                                           std::make_pair("resnet50.pickle.xz", 12)));

// The pickle carries Optimizer.step annotations: steps come from them, same verdict.
// A model split over two H200s in one process: cuda:0 keeps 6 MiB of features a step
// (1.8 GiB by step 300), and the long batch of step 301 does not fit in cuda:1's six
// layers under its 4 GiB cap. cuda:0's growth frees nothing on cuda:1: a genuine peak.
TEST(RealTraces, GrowthOnTheFirstGpuDoesNotExplainTheSecondsOom) {
  trace::Trace t = Load("split_over_two_gpus_long_batch.gpumem.xz");
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.leaks.suspects.size(), 1u);
  EXPECT_NEAR(r.leaks.suspects[0].bytes_per_step, 6.0 * (1 << 20), 0.1 * (1 << 20));
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].at.device, 1);
  EXPECT_EQ(r.ooms[0].at.step + 1, 301u);
  EXPECT_EQ(r.ooms[0].leaked_bytes, 0u);
  EXPECT_EQ(r.ooms[0].cls, OomClass::kPeak) << r.ooms[0].evidence;
}

// A loader thread on an H200 put batches of 24 views (480 MiB a batch) in a queue bounded
// at two and waited; the first step over all views at once needs more than the 4 GiB cap
// beside the four batches the thread holds (1.88 GiB). The step had allocated as much
// again since the thread's last block: the thread waits for the loop, the queue keeps
// nothing that grows, and the OOM is a genuine peak.
TEST(RealTraces, ABoundedQueueBesideAFirstStepTooLargeIsAPeak) {
  trace::Trace t = Load("bounded_prefetcher_first_step_too_large.gpumem.xz");
  Report r = BuildReport(t, {});
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_EQ(r.ooms[0].at.helper_site, "");
  EXPECT_EQ(r.ooms[0].cls, OomClass::kPeak) << r.ooms[0].evidence;
  // No step ended, but the dying process read the driver and NVML at the OOM: the memory
  // outside the allocator is told from those, as the verdict tells it.
  EXPECT_TRUE(r.outside.known());
  const std::string outside = FormatOutside(r.outside);
  EXPECT_NE(outside.find("at the OOM: allocator reserved 3.80 GiB; the driver says 5.64 GiB "
                         "in use of 139.80 GiB"),
            std::string::npos)
      << outside;
  EXPECT_EQ(outside.find("at the peak"), std::string::npos) << outside;
  EXPECT_TRUE(ReportToJson(r)["outside_allocator"]["known"].get<bool>());
}

// Hugging Face's Trainer under profile-only mode on an H200 (a small GPT-2, 8k vocabulary,
// 4 GiB cap): 50 training steps, then an evaluation with compute_metrics whose container
// concatenates each batch's 64 MiB of logits onto what it holds. The leak is named at the
// user's evaluate() line, kept by the Trainer, with the Trainer's setting as the fix.
TEST(RealTraces, AnEvaluationGatheringEveryBatchsLogitsIsTheTrainersLeak) {
  trace::Trace t = Load("hf_evaluation_gathers_logits.gpumem.xz");
  Report r = BuildReport(t, {});
  ASSERT_FALSE(r.leaks.suspects.empty());
  const LeakSuspect& top = r.leaks.suspects[0];
  EXPECT_EQ(top.name, "framework_cases.py:167 hf_evaluation_keeps_every_batch_logits");
  EXPECT_EQ(top.keeper, Keeper::kHfEvaluation);
  ASSERT_TRUE(r.fatal_oom.has_value());
  const OomExplanation& x = r.ooms[*r.fatal_oom];
  EXPECT_EQ(x.cls, OomClass::kLeak) << x.evidence;
  EXPECT_EQ(x.fix, KeeperFix(Keeper::kHfEvaluation)) << x.fix;
}

// The same with a 50,257-token vocabulary: the fifth batch's concatenation (1.92 GiB)
// fails in the evaluation's first "step", too soon for growth. A genuine peak, whose fix
// says first that the Trainer's container made the request.
TEST(RealTraces, AnEvaluationOutWithinFiveBatchesIsAPeakTheTrainerRequested) {
  trace::Trace t = Load("hf_evaluation_large_vocabulary.gpumem.xz");
  Report r = BuildReport(t, {});
  ASSERT_TRUE(r.fatal_oom.has_value());
  const OomExplanation& x = r.ooms[*r.fatal_oom];
  EXPECT_EQ(x.cls, OomClass::kPeak) << x.evidence;
  EXPECT_EQ(x.at.request_keeper, Keeper::kHfEvaluation);
  EXPECT_EQ(x.fix.find("The request that failed was made by Hugging Face's Trainer"), 0u)
      << x.fix;
}

// A leak on a whole H200 with no cap, under PyTorch's allocator, whose OOM came at step
// 1073 with 63 GiB of the cache free in pieces too small for the next 72 MiB: a leak, and
// the pieces brought the OOM ~900 steps before the leak alone would have.
TEST(RealTraces, ALeakCutShortByPiecesOfTheCache) {
  trace::Trace t = Load("whole_device_leak_in_pieces.gpumem.xz");
  Report r = BuildReport(t, {});
  ASSERT_TRUE(r.fatal_oom.has_value());
  const OomExplanation& x = r.ooms[*r.fatal_oom];
  EXPECT_EQ(x.cls, OomClass::kLeak) << x.evidence;
  EXPECT_EQ(x.at.step + 1, 1073u);
  EXPECT_NE(x.evidence.find("the cache also held 63.21 GiB free, in pieces of at most "
                            "60.44 MiB (fragmentation), which brought this OOM about 904 "
                            "steps early"),
            std::string::npos)
      << x.evidence;
  ASSERT_TRUE(r.projected_oom_step.has_value());
  EXPECT_NEAR(static_cast<double>(*r.projected_oom_step), 1988.0, 20.0);
}

// PyTorch memory snapshots of unchanged scripts (tests/gpu/snapshot_run.py: the recorder's
// ring of 100,000 events, Python stacks), each run under a 4 GiB cap the snapshot does not
// record, on one H200 (tests/gpu/results/h200-2026-11-29d/, call 2).

const OomExplanation& FatalOom(const Report& r) {
  EXPECT_TRUE(r.fatal_oom.has_value());
  return r.ooms[r.fatal_oom.value_or(0)];
}

// 100 training steps, all before the ring's first event, then generation keeping every
// tenth output: steps come from the generation's repeats, and the kept line is named.
TEST(RealTraces, ASnapshotOfGenerationAfterTrainingIsALeakAtItsLine) {
  trace::Trace t = Load("snapshot_every_tenth_generation_kept_after_training.pickle.xz");
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.method, StepMethod::kInferred);
  EXPECT_EQ(FatalOom(r).cls, OomClass::kLeak) << FatalOom(r).evidence;
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_EQ(r.sites.name(r.leaks.suspects[0].site),
            "tests/gpu/diagnosis_cases.py:559 every_tenth_generation_kept_after_training");
}

// 20 optimizer steps, then a server's requests, every reply kept: the requests after the
// last marked step are steps of their own, and the reply line is the leak.
TEST(RealTraces, ASnapshotOfServingAfterTrainingIsALeakAtItsLine) {
  trace::Trace t = Load("snapshot_async_server_keeps_every_reply.pickle.xz");
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.steps.method, StepMethod::kAnnotations);
  EXPECT_GT(r.steps.count, 1000u) << r.steps.detail;
  EXPECT_EQ(FatalOom(r).cls, OomClass::kLeak) << FatalOom(r).evidence;
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_EQ(r.sites.name(r.leaks.suspects[0].site), "tests/gpu/diagnosis_cases.py:2255 handle");
}

// The one matrix multiply past the cap, after 300 steps and 20 gathered batches: the
// driver had 129 GiB free, so the cap was the process's own, at least what it held, and
// the request alone is past it.
TEST(RealTraces, ASnapshotUnderACapItDoesNotRecordIsJudgedAgainstWhatItHeld) {
  trace::Trace t = Load("snapshot_retrieval_scores_do_not_fit.pickle.xz");
  Report r = BuildReport(t, {});
  const OomExplanation& x = FatalOom(r);
  EXPECT_EQ(x.cls, OomClass::kPeak) << x.evidence;
  EXPECT_EQ(x.capacity, r.timeline.devices[0].reserved);
  EXPECT_NE(x.capacity_source.find("a cap of its own"), std::string::npos) << x.capacity_source;
  ASSERT_TRUE(r.capacity.has_value());
  EXPECT_EQ(*r.capacity, x.capacity);
}

// 300 steps keeping 6 MiB each, then an evaluation whose one request (2.33 GiB) is past
// the most the process held: under that lower bound a genuine peak, and the evidence says
// under which cap the kept memory, named at its line, would have been what ran out.
// With the cap the case ran under (4 GiB), a leak.
TEST(RealTraces, ASnapshotPeakUnderAnUnknownCapSaysWhenItWouldBeALeak) {
  trace::Trace t = Load("snapshot_leak_surfaces_at_a_larger_evaluation.pickle.xz");
  const Report inferred = BuildReport(t, {});
  const OomExplanation& x = FatalOom(inferred);
  EXPECT_EQ(x.cls, OomClass::kPeak) << x.evidence;
  EXPECT_NE(x.evidence.find("The trace does not record the cap, only that it was at least "
                            "2.11 GiB: under a cap of 2.43 GiB or more"),
            std::string::npos)
      << x.evidence;
  EXPECT_NE(x.evidence.find("(most at tests/gpu/diagnosis_cases.py:1155 "
                            "leak_surfaces_at_a_larger_evaluation)"),
            std::string::npos)
      << x.evidence;
  ReportOptions given;
  given.capacity = std::uint64_t{4} << 30;
  const Report told = BuildReport(t, given);
  EXPECT_EQ(FatalOom(told).cls, OomClass::kLeak) << FatalOom(told).evidence;
}

// Adam's first step past the cap: its Optimizer.step range closes as the error unwinds,
// with nothing allocated after the OOM, so the OOM ended the run.
TEST(RealTraces, ASnapshotWhoseStepClosedAsTheErrorUnwoundDiedOfIt) {
  trace::Trace t = Load("snapshot_adam_moments_do_not_fit.pickle.xz");
  Report r = BuildReport(t, {});
  EXPECT_EQ(r.recovered_ooms, 0u);
  EXPECT_EQ(FatalOom(r).cls, OomClass::kPeak) << FatalOom(r).evidence;
}

// A run under profile-only mode on an H200 whose own memory never grew: another process
// took the 138.85 GiB left of the GPU at step 200, and the long batch of step 401 found the
// driver with 27.56 MiB free, under the 4 GiB cap. The NVML note the dying process wrote
// names the other process.
TEST(RealTraces, AnotherProcessFillingTheGpuIsMemoryHeldOutside) {
  trace::Trace t = Load("another_process_fills_the_gpu.gpumem.xz");
  Report r = BuildReport(t, {});
  ASSERT_TRUE(r.fatal_oom.has_value());
  const OomExplanation& x = r.ooms[*r.fatal_oom];
  EXPECT_EQ(x.cls, OomClass::kHeldOutside) << x.evidence;
  EXPECT_NE(x.evidence.find("other processes held 138.85 GiB (pid 2848 138.85 GiB)"),
            std::string::npos)
      << x.evidence;
  EXPECT_TRUE(r.leaks.suspects.empty());
  // Another process held it: the fix is where to run, not what a library should free.
  EXPECT_EQ(x.fix, HeldOutsideFix(1, 0)) << x.fix;
  EXPECT_EQ(x.fix.find("cupy"), std::string::npos) << x.fix;
}

// Under gpumem's allocator on an H200, an extension took 256 MiB a step from the driver
// (cuMemAlloc through ctypes) and never gave it back; at step 554 the driver had 469 MiB
// free, under the 512 MiB gpumem keeps for other libraries, and gpumem refused an 8 MiB
// request far under its 4 GiB cap. The CUPTI trace beside it says who held the device,
// from which line, and that it grew every step: a leak outside the allocator.
TEST(RealTraces, AnExtensionThatKeepsDeviceMemoryEachStepIsALeakOutsideTheAllocator) {
  const WithCupti run("extension_fills_the_gpu");
  Report r = run.Build();
  ASSERT_TRUE(r.fatal_oom.has_value());
  const OomExplanation& x = r.ooms[*r.fatal_oom];
  EXPECT_EQ(x.at.headroom, 512u << 20);
  EXPECT_EQ(x.cls, OomClass::kLeak) << x.evidence;
  EXPECT_NE(x.evidence.find("memory held outside the allocator grew: diagnosis_cases.py:2598 "
                            "extension_takes_device_memory_each_step took 256.00 MiB per step "
                            "from the driver and kept it"),
            std::string::npos)
      << x.evidence;
  EXPECT_NE(x.evidence.find("(gpumem keeps 512.00 MiB free for other libraries)"),
            std::string::npos)
      << x.evidence;
  EXPECT_EQ(x.fix, OutsideLeakFix(OutsideLibrary::kOther));
  // The leak suspects name that line, as the only one that grew.
  const nlohmann::json suspects = ReportToJson(r)["leak_suspects"];
  ASSERT_EQ(suspects.size(), 1u) << suspects.dump();
  EXPECT_EQ(suspects[0]["outside_allocator"], true);
  EXPECT_EQ(suspects[0]["bytes_per_step"], 256.0 * (1 << 20));
  Report alone = BuildReport(run.main, {});  // without the CUPTI trace no one holds it
  EXPECT_EQ(alone.ooms[*alone.fatal_oom].cls, OomClass::kPeak);
}

// Both ranks of a torchrun job (FSDP2, two H200s, profile-only mode) made a process group
// every step and never destroyed it, after filling the GPU but 8 GiB: NCCL's memory grew
// by a communicator's buffers a step, most of it on NCCL's own threads, until NCCL's own
// cuMemCreate failed in step 13 (NCCL's "unhandled cuda error"). Rank 1's traces: a leak
// outside the allocator in NCCL, named by the line that makes the group.
TEST(RealTraces, AProcessGroupMadeEachStepIsALeakInNccl) {
  const WithCupti run("process_group_made_each_step_fills_the_gpu");
  Report r = run.Build();
  ASSERT_TRUE(r.fatal_failed_outside.has_value()) << Verdict(r);
  EXPECT_EQ(r.outside_holder.library, OutsideLibrary::kNccl);
  EXPECT_EQ(r.outside_holder.site, "multi_gpu_train.py:243 main");
  ASSERT_TRUE(r.outside_holder.growth.has_value());
  EXPECT_NEAR(r.outside_holder.growth->bytes_per_step, 484.0 * (1 << 20), 10.0 * (1 << 20));
  EXPECT_EQ(Verdict(r).rfind("out of memory outside the allocator in step 13: leak outside the "
                             "allocator: NCCL's memory for multi_gpu_train.py:243 main (+",
                             0),
            0u)
      << Verdict(r);
  EXPECT_EQ(SummarizeRank(r, 1).leak_site,
            "NCCL's memory for multi_gpu_train.py:243 main (outside the allocator)");
  // The failed call's fix is that leak's, not the usual one for a cache that held memory.
  const nlohmann::json failed = ReportToJson(r)["failed_allocations"];
  ASSERT_FALSE(failed.empty());
  EXPECT_EQ(failed.back()["fix"], OutsideLeakFix(OutsideLibrary::kNccl));
  // Without the CUPTI trace no growth outside the allocator is seen.
  EXPECT_FALSE(BuildReport(run.main, {}).outside_holder.growth.has_value());
}

// An extension sized its workspace at step 200 to the device's free memory but 256 MiB
// (cuMemAlloc, PyTorch's allocator beside it) and kept it; a long batch at step 401 ran
// out far under the 4 GiB cap. Held outside by this process's own library, named at its
// line; it did not grow, so no leak. H200, profile-only mode.
TEST(RealTraces, AnExtensionsWorkspaceIsMemoryHeldOutside) {
  const WithCupti run("extension_workspace_fills_the_gpu");
  Report r = run.Build();
  ASSERT_TRUE(r.fatal_oom.has_value());
  const OomExplanation& x = r.ooms[*r.fatal_oom];
  EXPECT_EQ(x.cls, OomClass::kHeldOutside) << x.evidence;
  EXPECT_NE(x.evidence.find("libraries of this process other than the allocator, NCCL, cuBLAS "
                            "and cuDNN held 138.62 GiB"),
            std::string::npos)
      << x.evidence;
  EXPECT_NE(x.evidence.find("most of it from diagnosis_cases.py:2658 "
                            "extension_workspace_fills_the_device_before_a_long_batch"),
            std::string::npos)
      << x.evidence;
  EXPECT_FALSE(r.outside_holder.growth.has_value());
  EXPECT_TRUE(ReportToJson(r)["leak_suspects"].empty());
  // PyTorch's allocator asked the driver for the 128 MiB segment three times before it
  // raised the OOM (CUPTI saw them): the OOM itself, not another library's failures.
  EXPECT_TRUE(r.failed_outside.empty()) << DescribeFailedOutside(r.failed_outside.front());
  // This process's library held it, not another process: the fix says that alone.
  EXPECT_EQ(x.fix, HeldOutsideFix(0, 1)) << x.fix;
  EXPECT_EQ(x.fix.find("nvidia-smi"), std::string::npos) << x.fix;
  // Without the CUPTI trace no one is seen to hold it.
  EXPECT_EQ(BuildReport(run.main, {}).ooms[*r.fatal_oom].cls, OomClass::kPeak);
}

TEST(RealTraces, LeakyMlpPickleUsesAnnotations) {
  absl::StatusOr<trace::Trace> t =
      trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp.pickle.xz");
  if (!t.ok()) GTEST_SKIP() << "pickle reading not available: " << t.status();
  Report r = BuildReport(*t, {});
  EXPECT_EQ(r.steps.method, StepMethod::kAnnotations);
  EXPECT_EQ(r.steps.count, 60u);
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_EQ(r.leaks.suspects.front().name, "capture.py:78 leaky_mlp");
}

TEST(RealTraces, StepSiteMarksSteps) {
  trace::Trace t = Load("leaky_mlp.trace.tsv.gz");
  ReportOptions options;
  options.step_site = StepSite{"capture.py", 79};  // loss.backward(): one gradient seed a step
  Report r = BuildReport(t, options);
  EXPECT_EQ(r.steps.method, StepMethod::kStepSite);
  EXPECT_EQ(r.steps.count, 60u);
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_EQ(r.leaks.suspects.front().name, "capture.py:78 leaky_mlp");
}

}  // namespace
}  // namespace gpumem::report
