// Memory outside the allocator: per-library figures from CUPTI records, the allocator's
// own driver calls left out, the remainder the driver counts, the JSON shape, the merged
// column, the OOM verdict's text, a CUPTI trace read beside its main trace, and a trace
// without any of it.
#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"
#include "tools/report/cupti_companion.h"
#include "tools/report/json_report.h"
#include "tools/report/merge.h"
#include "tools/report/outside_format.h"
#include "tools/report/outside_library.h"
#include "tools/report/rank_summary.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/report/synthetic_builder.h"
#include "tools/report/synthetic_outside.h"
#include "tools/report/terminal_report.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {
namespace {

using A = synthetic::OutsideAnswer;

std::uint64_t Lib(const OutsideMoment& m, OutsideLibrary l) {
  return m.by_library[static_cast<std::size_t>(l)];
}

void ExpectLibraries(const OutsideMoment& m, std::uint64_t nccl) {
  EXPECT_EQ(Lib(m, OutsideLibrary::kNccl), nccl);
  EXPECT_EQ(Lib(m, OutsideLibrary::kCublas), A::kCublas);
  EXPECT_EQ(Lib(m, OutsideLibrary::kCudnn), A::kCudnn);
  EXPECT_EQ(Lib(m, OutsideLibrary::kOther), A::kOther);
  EXPECT_EQ(Lib(m, OutsideLibrary::kUnknown), A::kUnknown);
  EXPECT_EQ(m.pinned_host, A::kPinned);
  EXPECT_EQ(m.reserved, A::kReserved);  // the allocator's own driver calls are not outside
}

TEST(OutsideLibrary, NamedByTheSharedObject) {
  EXPECT_EQ(LibraryOfFile("/usr/lib/x86_64-linux-gnu/libnccl.so.2"), OutsideLibrary::kNccl);
  EXPECT_EQ(LibraryOfFile("/x/libcublasLt.so.12"), OutsideLibrary::kCublas);
  EXPECT_EQ(LibraryOfFile("libcublas.so"), OutsideLibrary::kCublas);
  EXPECT_EQ(LibraryOfFile("/x/libcudnn_ops.so.9"), OutsideLibrary::kCudnn);
  EXPECT_EQ(LibraryOfFile("/x/libc10_cuda.so"), OutsideLibrary::kAllocator);
  EXPECT_EQ(LibraryOfFile("/x/libgpumem.so"), OutsideLibrary::kAllocator);
  EXPECT_EQ(LibraryOfFile("/x/libtorch_cuda.so"), OutsideLibrary::kOther);
  EXPECT_EQ(LibraryOfFile("/x/libcudart.so.12"), OutsideLibrary::kUnknown);  // look further out
  EXPECT_EQ(LibraryOfFile("/x/libgpumem_cupti.so"), OutsideLibrary::kUnknown);
}

// A frame names a library only where it is native (a shared object, line 0) and past the
// CUDA plumbing: Python and API frames say nothing of it.
TEST(OutsideLibrary, OnlyNativeFramesNameTheLibrary) {
  EXPECT_EQ(LibraryOfFrame("/x/libnccl.so.2", 0), OutsideLibrary::kNccl);
  EXPECT_EQ(LibraryOfFrame("/x/libffi.so.8", 0), OutsideLibrary::kOther);
  EXPECT_EQ(LibraryOfFrame("/x/libcuda.so.1", 0), OutsideLibrary::kUnknown);
  EXPECT_EQ(LibraryOfFrame("train.py", 0), OutsideLibrary::kUnknown);
  EXPECT_EQ(LibraryOfFrame("/x/ext.so", 12), OutsideLibrary::kUnknown);
  EXPECT_EQ(LibraryOfFrame("[cuda-driver]", 0), OutsideLibrary::kUnknown);
  EXPECT_EQ(LibraryOfFrame("<frozen runpy>", 0), OutsideLibrary::kUnknown);
  EXPECT_EQ(LibraryOfFrame("", 0), OutsideLibrary::kUnknown);
}

TEST(OutsideAllocator, PeakIsTheStepWithMostDriverMemoryInUse) {
  const trace::Trace t = synthetic::OutsideAllocatorTrace(false);
  const Report r = BuildReport(t, {});
  const OutsideAllocator& o = r.outside;
  EXPECT_TRUE(o.calls_recorded);
  EXPECT_TRUE(o.driver_sampled);
  ASSERT_TRUE(o.peak && o.end);
  EXPECT_EQ(o.peak->step, A::kPeakStep);
  ExpectLibraries(*o.peak, A::kNccl + A::kNcclPeakExtra);
  EXPECT_EQ(o.peak->driver_used, A::UsedAtEnd() + A::kNcclPeakExtra);
  EXPECT_EQ(o.peak->remainder(), A::kContext);
  EXPECT_EQ(o.end->step, A::kSteps);
  ExpectLibraries(*o.end, A::kNccl);  // the extra buffer was released
  EXPECT_EQ(o.end->remainder(), A::kContext);
  EXPECT_EQ(o.end_is, "end");
}

// Under gpumem's allocator (or expandable segments) without native stacks: physical memory
// created and then mapped where the allocator mapped its pages is the allocator's own;
// memory another library created and mapped elsewhere is outside.
TEST(OutsideAllocator, CreatedThenMappedByTheAllocatorIsItsOwn) {
  synthetic::Builder b;
  using trace::Action;
  const std::uint32_t create = b.RawStack({{"[cuda-driver]", 0, "cuMemCreate"}});
  const std::uint32_t map = b.RawStack({{"[cuda-driver]", 0, "cuMemMap"}});
  b.Add(Action::kSegmentMap, 0x7e0000000000, 20 * A::kMiB);  // the allocator's own record
  b.Add(Action::kSegmentAlloc, 0x5001, 20 * A::kMiB, create);  // a handle
  b.Add(Action::kSegmentMap, 0x7e0000000000, 20 * A::kMiB, map);
  b.Add(Action::kSegmentAlloc, 0x5002, 20 * A::kMiB, create);  // NCCL's, mapped elsewhere
  b.Add(Action::kSegmentMap, 0x7d0000000000, 20 * A::kMiB, map);
  b.StepWithDriver(A::kTotal - 40 * A::kMiB - A::kContext, A::kTotal);
  const trace::Trace t = b.Take();
  const OutsideAllocator o = BuildReport(t, {}).outside;
  ASSERT_TRUE(o.end);
  EXPECT_EQ(o.end->reserved, 20 * A::kMiB);
  EXPECT_EQ(Lib(*o.end, OutsideLibrary::kUnknown), 20 * A::kMiB);
  EXPECT_EQ(o.end->remainder(), A::kContext);
}

TEST(OutsideAllocator, JsonShape) {
  const trace::Trace t = synthetic::OutsideAllocatorTrace(false);
  const nlohmann::json j = ReportToJson(BuildReport(t, {}))["outside_allocator"];
  EXPECT_EQ(j["known"], true);
  EXPECT_EQ(j["device"], 0);
  EXPECT_EQ(j["end_is"], "end");
  const nlohmann::json& p = j["peak"];
  EXPECT_EQ(p["step"], A::kPeakStep);
  EXPECT_EQ(p["allocator_reserved"], A::kReserved);
  EXPECT_EQ(p["outside"]["nccl"], A::kNccl + A::kNcclPeakExtra);
  EXPECT_EQ(p["outside"]["cublas"], A::kCublas);
  EXPECT_EQ(p["outside"]["cudnn"], A::kCudnn);
  EXPECT_EQ(p["outside"]["other"], A::kOther);
  EXPECT_EQ(p["outside"]["unknown"], A::kUnknown);
  EXPECT_EQ(p["outside"]["total"], A::Outside() + A::kNcclPeakExtra);
  EXPECT_EQ(p["pinned_host"], A::kPinned);
  EXPECT_EQ(p["driver_total"], A::kTotal);
  EXPECT_EQ(p["driver_used"], A::UsedAtEnd() + A::kNcclPeakExtra);
  EXPECT_EQ(p["remainder"], A::kContext);
  EXPECT_EQ(j["end"]["outside"]["nccl"], A::kNccl);
}

TEST(OutsideAllocator, TerminalNamesEachLibraryAndTheRemainder) {
  const trace::Trace t = synthetic::OutsideAllocatorTrace(false);
  const std::string text = FormatTerminal(BuildReport(t, {}), false);
  EXPECT_NE(text.find("Memory outside the allocator (device 0)"), std::string::npos) << text;
  EXPECT_NE(
      text.find("at the peak (step 3): allocator reserved 8.00 GiB; outside it NCCL 3.00 GiB, "
                "cuBLAS 256.00 MiB, cuDNN 128.00 MiB, other 32.00 MiB, unknown 64.00 MiB; "
                "pinned host memory 512.00 MiB"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("600.00 MiB CUDA context and calls CUPTI did not see"), std::string::npos)
      << text;
}

TEST(OutsideAllocator, OomVerdictSaysWhoHeldTheDevice) {
  const trace::Trace t = synthetic::OutsideAllocatorTrace(true);
  const Report r = BuildReport(t, {});
  ASSERT_TRUE(r.fatal_oom);
  EXPECT_EQ(r.outside.end_is, "OOM");
  ASSERT_TRUE(r.outside.end);
  EXPECT_EQ(r.outside.end->driver_used, A::UsedAtEnd());
  EXPECT_EQ(r.outside.end->remainder(), A::kContext);
  const std::string verdict = Verdict(r);
  EXPECT_NE(verdict.find("; the allocator held 8.00 GiB, NCCL 2.00 GiB, cuBLAS 256.00 MiB, cuDNN "
                         "128.00 MiB, other 32.00 MiB, unknown 64.00 MiB, context and unseen "
                         "600.00 MiB of 80.00 GiB"),
            std::string::npos)
      << verdict;
  EXPECT_EQ(ReportToJson(r)["outside_allocator"]["end_is"], "OOM");
}

TEST(OutsideAllocator, WithoutCuptiTheDriverStillGivesTheTotalOutside) {
  trace::Trace t = synthetic::OutsideAllocatorTrace(true);
  std::erase_if(t.events, [&](const trace::Event& e) { return IsDriverCall(t, e.stack_id); });
  const Report r = BuildReport(t, {});
  EXPECT_FALSE(r.outside.calls_recorded);
  ASSERT_TRUE(r.outside.end);
  EXPECT_EQ(r.outside.end->outside(), 0u);
  EXPECT_EQ(r.outside.end->remainder(), A::Outside() + A::kContext);
  EXPECT_NE(Verdict(r).find("; the allocator held 8.00 GiB, outside it 3.05 GiB of 80.00 GiB"),
            std::string::npos)
      << Verdict(r);
  EXPECT_TRUE(ReportToJson(r)["outside_allocator"]["end"]["outside"].is_null());
}

TEST(OutsideAllocator, AnOldTraceSaysUnknown) {
  const trace::Trace t = synthetic::PeakTrace();
  const Report r = BuildReport(t, {});
  EXPECT_FALSE(r.outside.known());
  const nlohmann::json j = ReportToJson(r)["outside_allocator"];
  EXPECT_EQ(j["known"], false);
  EXPECT_TRUE(j["peak"]["outside"].is_null());
  EXPECT_TRUE(j["peak"]["driver_used"].is_null());
  EXPECT_TRUE(j["peak"]["remainder"].is_null());
  EXPECT_NE(FormatTerminal(r, false).find("Memory outside the allocator (device 0):\n  unknown"),
            std::string::npos);
  EXPECT_EQ(Verdict(r).find("allocator held"), std::string::npos) << Verdict(r);
  EXPECT_EQ(SummarizeRank(r, 0).outside_allocator, std::nullopt);
}

TEST(OutsideAllocator, CuptiTraceBesideTheMainOneIsLinedUpByClockOrigin) {
  const trace::Trace main = synthetic::OutsideMainTrace();
  const trace::Trace cupti = synthetic::OutsideCuptiTrace();
  ReportOptions options;
  options.cupti = &cupti;
  const Report r = BuildReport(main, options);
  ASSERT_TRUE(r.outside.peak);
  EXPECT_TRUE(r.outside.calls_recorded);
  EXPECT_EQ(r.outside.peak->step, A::kPeakStep);
  ExpectLibraries(*r.outside.peak, A::kNccl + A::kNcclPeakExtra);
  EXPECT_EQ(r.outside.peak->remainder(), A::kContext);
  // Without the origins the CUPTI records would seem 0.5 s early: the buffer NCCL held
  // over step 3 would be gone before any step ended.
  trace::Trace unaligned = cupti;
  unaligned.run.clock_origin_ns.reset();
  options.cupti = &unaligned;
  EXPECT_EQ(Lib(*BuildReport(main, options).outside.peak, OutsideLibrary::kNccl), A::kNccl);
}

// A cuMemAlloc of 256 MiB with `stack` that failed (out of memory) 10 us after `main`'s
// last event, as the CUPTI trace `cupti` records it (on its own clock).
trace::FailedAllocation FailedAfterTheLastEvent(const trace::Trace& main,
                                                const trace::Trace& cupti, std::uint32_t stack) {
  const std::int64_t shift = (*cupti.run.clock_origin_ns - *main.run.clock_origin_ns) / 1000;
  trace::FailedAllocation failed;
  failed.time_us = main.events.back().time_us + 10 - shift;
  failed.size = 256 * A::kMiB;
  failed.call = "cuMemAlloc";
  failed.error = 2;
  failed.stack_id = stack;
  return failed;
}

// The CUPTI tracer writes the driver calls that failed to its own trace: one after the
// last step end there (a CUDA extension's cuMemAlloc) is the failure that ended the run,
// on the main trace's clock, named by the line that made it.
TEST(OutsideAllocator, AFailedCallInTheCuptiTraceEndsTheRun) {
  const trace::Trace main = synthetic::OutsideMainTrace();
  trace::Trace cupti = synthetic::OutsideCuptiTrace();
  // Its stack: the tracer's API frame, then the line that made the call.
  const auto frame = static_cast<std::uint32_t>(cupti.frames.size());
  cupti.frames.push_back({"[cuda-driver]", 0, "cuMemAlloc_v2"});
  cupti.frames.push_back({"ext.py", 12, "scratch"});
  const auto stack = static_cast<std::uint32_t>(cupti.stacks.size());
  cupti.stacks.push_back({frame, frame + 1});
  trace::FailedAllocation failed = FailedAfterTheLastEvent(main, cupti, stack);
  failed.device_free = 127 * A::kMiB;
  cupti.failed_allocations.push_back(failed);
  ReportOptions options;
  options.cupti = &cupti;
  const Report r = BuildReport(main, options);
  ASSERT_TRUE(r.fatal_failed_outside.has_value());
  const FailedOutside& f = r.failed_outside[*r.fatal_failed_outside];
  EXPECT_EQ(f.call.time_us, main.events.back().time_us + 10);
  EXPECT_EQ(f.step, A::kSteps);
  EXPECT_EQ(f.site, "ext.py:12 scratch");
  EXPECT_EQ(Verdict(r).rfind("out of memory outside the allocator in step 6: cuMemAlloc of "
                             "256.00 MiB failed",
                             0),
            0u)
      << Verdict(r);
  EXPECT_FALSE(BuildReport(main, {}).fatal_failed_outside.has_value());  // unseen without it
}

// An extension's own cuMemAlloc of 256 MiB before every step end, never freed, and then one
// that fails: a leak outside the allocator at the line that calls it, among the leak
// suspects too.
TEST(OutsideAllocator, ALibraryThatKeepsMemoryEachStepIsALeakOutsideTheAllocator) {
  const trace::Trace main = synthetic::OutsideMainTrace();
  std::uint32_t stack = 0;
  trace::Trace cupti = synthetic::OutsideCuptiTraceOfAnExtensionThatKeeps(main, &stack);
  cupti.failed_allocations.push_back(FailedAfterTheLastEvent(main, cupti, stack));
  ReportOptions options;
  options.cupti = &cupti;
  const Report r = BuildReport(main, options);
  ASSERT_TRUE(r.fatal_failed_outside.has_value());
  EXPECT_EQ(r.outside_holder.site, "ext.py:12 scratch");
  EXPECT_NE(Verdict(r).find("step 6: leak outside the allocator at ext.py:12 scratch "
                            "(+256.00 MiB/step); cuMemAlloc of 256.00 MiB failed"),
            std::string::npos)
      << Verdict(r);
  const nlohmann::json suspects = ReportToJson(r)["leak_suspects"];
  ASSERT_FALSE(suspects.empty());
  EXPECT_EQ(suspects[0]["site"], "ext.py:12 scratch");
  EXPECT_EQ(suspects[0]["outside_allocator"], true);
  EXPECT_EQ(suspects[0]["bytes_per_step"], 256.0 * A::kMiB);
}

// A run that ends before the leak outside the allocator fills the device: its verdict is
// that leak, the suspects name its line, and the merged table's rank carries it.
TEST(OutsideAllocator, ALeakOutsideTheAllocatorIsSaidWhereTheRunEndsWell) {
  const trace::Trace main = synthetic::OutsideMainTrace();
  std::uint32_t stack = 0;
  const trace::Trace cupti = synthetic::OutsideCuptiTraceOfAnExtensionThatKeeps(main, &stack);
  ReportOptions options;
  options.cupti = &cupti;
  const Report r = BuildReport(main, options);
  EXPECT_EQ(Verdict(r).rfind("leak outside the allocator at ext.py:12 scratch (+256.00 "
                             "MiB/step): a library of this process took device memory",
                             0),
            0u)
      << Verdict(r);
  const std::string text = FormatTerminal(r, false);
  EXPECT_NE(text.find("Leak suspects:\n  outside the allocator: ext.py:12 scratch\n     "
                      "+256.00 MiB/step"),
            std::string::npos)
      << text;
  // The driver had 70,600 MiB free at the last of the 5 step ends: at 256 MiB a step the
  // device is full 276 steps later.
  ASSERT_TRUE(r.outside.end && r.outside.end->driver_used);
  ASSERT_EQ(A::kTotal - *r.outside.end->driver_used, 70600 * A::kMiB);
  ASSERT_TRUE(r.outside_projected_oom_step.has_value());
  EXPECT_EQ(*r.outside_projected_oom_step + 1, 281u);
  EXPECT_NE(text.find("At this rate the device has no free memory left in step 281."),
            std::string::npos)
      << text;
  EXPECT_EQ(ReportToJson(r)["outside_projected_oom_step"], 281);
  const RankSummary rank = SummarizeRank(r, 0);
  EXPECT_EQ(rank.leak_site, "ext.py:12 scratch (outside the allocator)");
  EXPECT_EQ(rank.projected_oom_step, r.outside_projected_oom_step);
  EXPECT_EQ(rank.leak_bytes_per_step, 256.0 * A::kMiB);
  // Without the CUPTI trace nothing outside the allocator is seen.
  EXPECT_EQ(Verdict(BuildReport(main, {})).find("outside the allocator"), std::string::npos);
  EXPECT_TRUE(BuildReport(main, {}).outside.held_over_time.empty());
  // Over time, for the page's timeline: every library's memory together, in time order,
  // ending at what the end's figures count outside the allocator.
  const std::vector<HeldOutsideAt>& held = r.outside.held_over_time;
  ASSERT_FALSE(held.empty());
  for (std::size_t i = 1; i < held.size(); ++i) EXPECT_LE(held[i - 1].time_us, held[i].time_us);
  EXPECT_EQ(held.back().bytes, r.outside.end->outside());
  EXPECT_GE(held.back().bytes, r.outside_holder.bytes);
}

// Every step makes a process group and never destroys it: NCCL's memory grows by a
// communicator's buffers a step, some made at the line that makes the group, most on
// NCCL's own threads. The run ends well; its verdict is a leak outside the allocator in
// NCCL (all of its growth), at the line that makes the group, with what that usually is;
// the suspects and the rank's row say so. NCCL's buffer held over one step only
// (OutsideCuptiTrace's) is no leak.
TEST(OutsideAllocator, AProcessGroupMadeEachStepIsALeakInNccl) {
  const trace::Trace main = synthetic::OutsideMainTrace();
  std::uint32_t stack = 0;
  synthetic::KeptEachStep groups;
  groups.api = "cuMemCreate";
  groups.library_file = "/usr/lib/x86_64-linux-gnu/libnccl.so.2";
  groups.library_function = "ncclCommInitRankConfig+0x2a";
  groups.file = "train.py";
  groups.line = 239;
  groups.function = "main";
  groups.bytes = 470 * A::kMiB;
  trace::Trace cupti = synthetic::OutsideCuptiTraceOfALibraryThatKeeps(main, groups, &stack);
  // Most of a communicator's buffers come from NCCL's own threads: no user's line.
  synthetic::KeptEachStep proxy = groups;
  proxy.library_function = "ncclProxyService+0x1f0";
  proxy.file.clear();
  proxy.bytes = 300 * A::kMiB;
  synthetic::AddKeptEachStep(main, proxy, &cupti);
  ReportOptions options;
  options.cupti = &cupti;
  const Report r = BuildReport(main, options);
  EXPECT_EQ(r.outside_holder.library, OutsideLibrary::kNccl);
  EXPECT_EQ(Verdict(r).rfind("leak outside the allocator: NCCL's memory for train.py:239 main "
                             "(+", 0),
            0u)
      << Verdict(r);
  EXPECT_NE(Verdict(r).find("/step): a process group made every step and never destroyed keeps "
                            "an NCCL communicator's buffers"),
            std::string::npos)
      << Verdict(r);
  // All of NCCL's growth, its own threads' too (the fit over five step ends also takes in
  // the buffer OutsideCuptiTrace's NCCL holds over one of them).
  ASSERT_TRUE(r.outside_holder.growth.has_value());
  EXPECT_GE(r.outside_holder.growth->bytes_per_step, 770.0 * A::kMiB);
  const nlohmann::json suspects = ReportToJson(r)["leak_suspects"];
  ASSERT_EQ(suspects.size(), 1u) << suspects.dump();
  EXPECT_EQ(suspects[0]["library"], "nccl");
  EXPECT_EQ(suspects[0]["site"], "NCCL's memory for train.py:239 main");
  EXPECT_EQ(SummarizeRank(r, 0).leak_site,
            "NCCL's memory for train.py:239 main (outside the allocator)");
  // NCCL's own memory that does not grow is no leak.
  const trace::Trace plain = synthetic::OutsideCuptiTrace();
  options.cupti = &plain;
  EXPECT_FALSE(BuildReport(main, options).outside_holder.growth.has_value());
}

TEST(OutsideAllocator, MergedTableHasTheOutsideColumn) {
  trace::Trace a = synthetic::OutsideAllocatorTrace(false);
  trace::Trace b = synthetic::PeakTrace();
  a.source = "run-0.gpumem";
  b.source = "run-1.gpumem";
  std::vector<RankSummary> ranks = {SummarizeRank(BuildReport(a, {}), 0),
                                    SummarizeRank(BuildReport(b, {}), 1)};
  EXPECT_EQ(ranks[0].outside_allocator, A::Outside() + A::kNcclPeakExtra + A::kContext);
  const Merged m = MergeRanks(std::move(ranks));
  const std::string text = FormatMerged(m);
  EXPECT_NE(text.find("outside alloc"), std::string::npos) << text;
  EXPECT_NE(text.find(Bytes(static_cast<double>(A::Outside() + A::kNcclPeakExtra + A::kContext))),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("unknown"), std::string::npos) << text;
  const nlohmann::json j = MergedToJson(m);
  EXPECT_EQ(j["ranks"][0]["outside_allocator"], A::Outside() + A::kNcclPeakExtra + A::kContext);
  EXPECT_TRUE(j["ranks"][1]["outside_allocator"].is_null());
}

TEST(CuptiCompanion, NamesAndGlobs) {
  EXPECT_EQ(CuptiCompanionPath("out/run-3.gpumem"), "out/run-3.cupti.gpumem");
  EXPECT_EQ(CuptiCompanionPath("out/run-3.cupti.gpumem"), "");
  EXPECT_EQ(CuptiCompanionPath("x.pickle"), "");
  // A pair kept compressed, as shipped or archived.
  EXPECT_EQ(CuptiCompanionPath("out/run-3.gpumem.xz"), "out/run-3.cupti.gpumem.xz");
  EXPECT_EQ(CuptiCompanionPath("out/run-3.gpumem.zst"), "out/run-3.cupti.gpumem.zst");
  EXPECT_EQ(CuptiCompanionPath("out/run-3.cupti.gpumem.xz"), "");
  EXPECT_EQ(CuptiCompanionPath("x.pickle.xz"), "");
  EXPECT_EQ(MainTraces({"run-0.cupti.gpumem.xz", "run-0.gpumem.xz"}),
            (std::vector<std::string>{"run-0.gpumem.xz"}));
  EXPECT_EQ(MainTraces(
                {"run-0.cupti.gpumem", "run-0.gpumem", "run-1.gpumem", "lone.cupti.gpumem"}),
            (std::vector<std::string>{"run-0.gpumem", "run-1.gpumem", "lone.cupti.gpumem"}));
  // A companion written beside a taken name, as a shell's run-*.gpumem lists it.
  EXPECT_EQ(MainTraces({"run-0.cupti.3146.gpumem", "run-0.cupti.gpumem", "run-0.gpumem",
                               "run-1.gpumem", "run-10.gpumem"}),
            (std::vector<std::string>{"run-0.gpumem", "run-1.gpumem", "run-10.gpumem"}));
  EXPECT_EQ(LoadCuptiCompanion("/nonexistent/run-0.gpumem"), std::nullopt);
}

// Under GPUMEM_TRACE_MAX both traces are rings: NAME.segK.gpumem beside NAME.gpumem and
// NAME.cupti.segK.gpumem beside NAME.cupti.gpumem.
TEST(CuptiCompanion, RingSegmentsAreNeitherRanksNorMainTraces) {
  EXPECT_EQ(CuptiCompanionPath("out/run-3.seg12.gpumem"), "out/run-3.cupti.gpumem");
  EXPECT_EQ(CuptiCompanionPath("out/run-3.cupti.seg0.gpumem"), "");
  EXPECT_EQ(CuptiCompanionPath("out/run-3.segment.gpumem"), "out/run-3.segment.cupti.gpumem");
  EXPECT_EQ(CuptiCompanionPath("out/run-3.seg.gpumem"), "out/run-3.seg.cupti.gpumem");
  // A shell's run-*.gpumem in a folder of two ranks' rings.
  EXPECT_EQ(MainTraces({"run-0.cupti.gpumem", "run-0.cupti.seg3.gpumem", "run-0.cupti.seg4.gpumem",
                        "run-0.gpumem", "run-0.seg7.gpumem", "run-0.seg8.gpumem",
                        "run-1.cupti.seg0.gpumem", "run-1.cupti.gpumem", "run-1.gpumem",
                        "run-1.seg0.gpumem"}),
            (std::vector<std::string>{"run-0.gpumem", "run-1.gpumem"}));
  // A companion ring alone is one trace; a main segment named alone reads the companion
  // ring through its name.
  EXPECT_EQ(MainTraces({"lone.cupti.gpumem", "lone.cupti.seg2.gpumem"}),
            (std::vector<std::string>{"lone.cupti.gpumem"}));
  EXPECT_EQ(MainTraces({"run-0.seg7.gpumem", "run-0.cupti.seg3.gpumem"}),
            (std::vector<std::string>{"run-0.seg7.gpumem"}));
  // Segments named without their ring's name (run-*.seg*.gpumem): one trace a ring, read
  // through its first segment listed, never one rank a segment.
  EXPECT_EQ(MainTraces({"run-0.seg7.gpumem", "run-0.seg8.gpumem", "run-1.seg2.gpumem",
                        "run-1.seg3.gpumem", "run-1.seg4.gpumem"}),
            (std::vector<std::string>{"run-0.seg7.gpumem", "run-1.seg2.gpumem"}));
}

}  // namespace
}  // namespace gpumem::report
