// Libraries that keep what the user's code never holds: which frames count, and what the
// report says of a leak, or a request that failed, made inside one.
#include "tools/report/library_keepers.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/report/event_list.h"
#include "tools/report/json_report.h"
#include "tools/report/report.h"
#include "tools/trace/frame_table.h"

namespace gpumem::report {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr char kTrainerUtils[] =
    "/venv/lib/python3.12/site-packages/transformers/trainer_pt_utils.py";
constexpr char kTrainer[] = "/venv/lib/python3.12/site-packages/transformers/trainer.py";

struct Frame {
  std::string filename;
  std::string function;
};

TEST(LibraryKeepers, TheEvaluationContainerKeepsAndTheLoopAloneDoesNot) {
  EXPECT_EQ(KeeperOfFrame(kTrainerUtils, "EvalLoopContainer.add"), Keeper::kHfEvaluation);
  EXPECT_EQ(KeeperOfFrame(kTrainerUtils, "nested_concat"), Keeper::kHfEvaluation);
  EXPECT_EQ(KeeperOfFrame(kTrainerUtils, "torch_pad_and_concatenate"), Keeper::kHfEvaluation);
  // The loop also runs the model: its activations are not what the container keeps.
  EXPECT_EQ(KeeperOfFrame(kTrainer, "Trainer.evaluation_loop"), Keeper::kNone);
  EXPECT_EQ(KeeperOfFrame(kTrainerUtils, "nested_detach"), Keeper::kNone);
  constexpr char kAuroc[] = "/venv/site-packages/torchmetrics/classification/auroc.py";
  EXPECT_EQ(KeeperOfFrame(kAuroc, "BinaryAUROC.update"), Keeper::kMetricStates);
  EXPECT_EQ(KeeperOfFrame(kAuroc, "MultilabelAUROC.compute"), Keeper::kMetricStates);
  EXPECT_EQ(KeeperOfFrame("/venv/site-packages/torchmetrics/metric.py",
                          "Metric._wrap_update.<locals>.wrapped_func"),
            Keeper::kMetricStates);
  EXPECT_EQ(KeeperOfFrame(kAuroc, "update"), Keeper::kMetricStates);  // before Python 3.11
  // torchmetrics' functions called alone keep nothing: a too-large batch there is a peak.
  EXPECT_EQ(KeeperOfFrame("/venv/site-packages/torchmetrics/functional/classification/auroc.py",
                          "_binary_auroc_compute"),
            Keeper::kNone);
  EXPECT_EQ(KeeperOfFrame("train.py", "nested_concat"), Keeper::kNone);
}

TEST(LibraryKeepers, OnlyFramesInsideTheSiteCount) {
  const std::vector<Frame> inside = {{"/venv/site-packages/torch/functional.py", "cat"},
                                     {kTrainerUtils, "nested_concat"},
                                     {kTrainer, "Trainer.evaluation_loop"},
                                     {"train.py", "main"}};
  EXPECT_EQ(KeeperInside(inside), Keeper::kHfEvaluation);
  // The user's own metric code called from a library's loop: the user's frame comes
  // first, and what it keeps is the user's.
  const std::vector<Frame> outside = {{"metrics.py", "Accumulator.update"},
                                      {"/venv/site-packages/torchmetrics/metric.py",
                                       "Metric.forward"},
                                      {"train.py", "main"}};
  EXPECT_EQ(KeeperInside(outside), Keeper::kNone);
  EXPECT_EQ(KeeperInside(std::vector<Frame>{}), Keeper::kNone);
}

TEST(LibraryKeepers, TheFixIsTheLibrarysForALeakAndFirstForAPeakItRequested) {
  const std::string leak = FixWithKeeper(OomClass::kLeak, Keeper::kHfEvaluation, Keeper::kNone,
                                         OomFix(OomClass::kLeak));
  EXPECT_NE(leak.find("eval_accumulation_steps"), std::string::npos) << leak;
  EXPECT_EQ(leak.find("loss.item()"), std::string::npos) << leak;
  const std::string peak = FixWithKeeper(OomClass::kPeak, Keeper::kNone, Keeper::kMetricStates,
                                         OomFix(OomClass::kPeak));
  EXPECT_EQ(peak.find("The request that failed was made by a torchmetrics metric"), 0u) << peak;
  EXPECT_NE(peak.find("smaller batch"), std::string::npos) << peak;  // the peak's own, after
  // A keeper says nothing of fragmentation, nor of a leak it does not keep.
  EXPECT_EQ(FixWithKeeper(OomClass::kFragmentation, Keeper::kHfEvaluation,
                          Keeper::kHfEvaluation, "as before"),
            "as before");
  EXPECT_EQ(FixWithKeeper(OomClass::kLeak, Keeper::kNone, Keeper::kHfEvaluation, "as before"),
            "as before");
}

// A metric's compute() concatenating the states it kept: the request grows with the
// leak, so the leak explains the OOM even where the request alone would not have fit.
TEST(LibraryKeepers, ARequestMadeByTheLibraryKeepingTheGrowthIsPartOfTheLeak) {
  EXPECT_TRUE(RequestedByGrower(Keeper::kMetricStates, Keeper::kMetricStates));
  EXPECT_FALSE(RequestedByGrower(Keeper::kHfEvaluation, Keeper::kMetricStates));
  EXPECT_FALSE(RequestedByGrower(Keeper::kNone, Keeper::kNone));  // no library at all
  OomFigures f;
  f.finished_steps = 100;
  f.allocated = 3500 * kMiB;
  f.request = 1600 * kMiB;
  f.capacity = 4096 * kMiB;
  f.growth_suspected = true;
  f.grown_bytes = 990 * kMiB;  // 3500 - 990 + 1600 > 4096
  EXPECT_EQ(ClassifyOom(f), OomClass::kPeak);
  EXPECT_EQ(LeakRequestText(f, "x"), "without it the request of 1.56 GiB would have fit in "
                                     "the cap of 4.00 GiB");
  f.request_from_grower = true;
  EXPECT_EQ(ClassifyOom(f), OomClass::kLeak);
  EXPECT_EQ(LeakRequestText(f, KeeperName(Keeper::kMetricStates)),
            "the request of 1.56 GiB was made by a torchmetrics metric (its list states) for "
            "what it keeps, which grows with it");
  f.grown_bytes = 0;  // no growth: the library's request alone is no leak
  EXPECT_EQ(ClassifyOom(f), OomClass::kPeak);
}

// Training steps, then an evaluation whose container concatenates each batch's logits
// onto what it holds (`batch_bytes` more each batch) until `fail_at` fails.
trace::Trace Evaluation(std::uint64_t batch_bytes, int training_steps, int batches,
                        std::uint64_t fail_at) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  const std::uint32_t user = frames.Intern({"train.py", 30, "<module>"});
  const std::uint32_t loop = frames.Intern({kTrainer, 2906, "Trainer.evaluation_loop"});
  const std::uint32_t concat = frames.Intern({kTrainerUtils, 129, "nested_concat"});
  const std::uint32_t forward =
      frames.Intern({"/venv/site-packages/torch/nn/modules/linear.py", 125, "forward"});
  const std::uint32_t train = frames.Intern({"train.py", 20, "<module>"});
  const std::uint32_t kept = frames.InternStack({concat, loop, user});
  const std::uint32_t logits = frames.InternStack({forward, loop, user});
  const std::uint32_t step = frames.InternStack({forward, train});
  test_trace::Events events(&t);
  std::uint64_t addr = 1 << 30;
  for (int s = 0; s < training_steps; ++s) {
    events.Push(trace::Action::kAlloc, addr, 8 * kMiB, step);
    events.Free(addr, 8 * kMiB, step);
    events.Step();
  }
  // Each evaluation batch is a pass: its model call marks it, as the recorder does.
  std::uint64_t held = 0, held_at = 0;
  for (int b = 0; b < batches; ++b) {
    const std::uint64_t out = addr += 16 * batch_bytes;
    events.Push(trace::Action::kAlloc, out, batch_bytes, logits);
    const std::uint64_t joined = addr += 16 * batch_bytes;
    events.Push(trace::Action::kAlloc, joined, held + batch_bytes, kept);
    if (held > 0) events.Free(held_at, held, kept);
    events.Free(out, batch_bytes, logits);
    held += batch_bytes;
    held_at = joined;
    events.Step();
  }
  events.Push(trace::Action::kOom, 0, fail_at, kept);
  return t;
}

TEST(LibraryKeepers, AnEvaluationThatGathersEveryBatchIsALeakTheTrainerKeeps) {
  const trace::Trace t = Evaluation(4 * kMiB, 8, 18, 124 * kMiB);
  ReportOptions options;
  options.capacity = 160 * kMiB;
  const Report r = BuildReport(t, options);
  ASSERT_FALSE(r.leaks.suspects.empty());
  EXPECT_EQ(r.leaks.suspects[0].keeper, Keeper::kHfEvaluation);
  ASSERT_TRUE(r.fatal_oom.has_value());
  const OomExplanation& x = r.ooms[*r.fatal_oom];
  EXPECT_EQ(x.cls, OomClass::kLeak) << x.evidence;
  EXPECT_NE(x.evidence.find("kept by Hugging Face's Trainer (its evaluation loop)"),
            std::string::npos)
      << x.evidence;
  EXPECT_NE(x.fix.find("eval_accumulation_steps"), std::string::npos) << x.fix;
  const nlohmann::json j = ReportToJson(r);
  EXPECT_EQ(j["leak_suspects"][0]["kept_by_library"], "hf_trainer_evaluation") << j.dump(1);
}

// Too few batches to call it growth: the request that failed was the container's.
TEST(LibraryKeepers, APeakWhoseFailedRequestTheTrainerMadeSaysSoFirst) {
  const trace::Trace t = Evaluation(40 * kMiB, 8, 2, 120 * kMiB);
  ReportOptions options;
  options.capacity = 160 * kMiB;
  const Report r = BuildReport(t, options);
  ASSERT_TRUE(r.fatal_oom.has_value());
  const OomExplanation& x = r.ooms[*r.fatal_oom];
  EXPECT_EQ(x.cls, OomClass::kPeak) << x.evidence;
  EXPECT_EQ(x.fix.find("The request that failed was made by Hugging Face's Trainer"), 0u) << x.fix;
}

}  // namespace
}  // namespace gpumem::report
