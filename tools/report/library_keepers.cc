#include "tools/report/library_keepers.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpumem::report {
namespace {

// Python 3.11 and later name a method by its class ("BinaryAUROC.update"); earlier ones by
// its name alone.
bool IsMetricMethod(absl::string_view function) {
  for (absl::string_view method : {"update", "compute", "forward"}) {
    if (function == method || absl::EndsWith(function, absl::StrCat(".", method))) return true;
  }
  return absl::StartsWith(function, "Metric._wrap_") ||
         absl::StartsWith(function, "Metric._forward");
}

}  // namespace

Keeper KeeperOfFrame(absl::string_view filename, absl::string_view function) {
  // The evaluation loop's container, which concatenates each batch onto what it holds
  // (the default) until eval_accumulation_steps batches have passed.
  if (absl::EndsWith(filename, "transformers/trainer_pt_utils.py") &&
      (absl::StartsWith(function, "EvalLoopContainer") || function == "nested_concat" ||
       function == "torch_pad_and_concatenate")) {
    return Keeper::kHfEvaluation;
  }
  // A metric object's update (what it allocates there is what its list states keep) or
  // compute (which works over all of them); not torchmetrics' functions called alone.
  if (absl::StrContains(filename, "torchmetrics/") && IsMetricMethod(function)) {
    return Keeper::kMetricStates;
  }
  return Keeper::kNone;
}

const char* KeeperName(Keeper k) {
  switch (k) {
    case Keeper::kHfEvaluation: return "Hugging Face's Trainer (its evaluation loop)";
    case Keeper::kMetricStates: return "a torchmetrics metric (its list states)";
    case Keeper::kNone: break;
  }
  return "";
}

std::string KeptByText(Keeper k) {
  return k == Keeper::kNone ? "" : absl::StrCat(", kept by ", KeeperName(k));
}

bool RequestedByGrower(Keeper requester, Keeper grower) {
  return requester != Keeper::kNone && requester == grower;
}

const char* KeeperKey(Keeper k) {
  switch (k) {
    case Keeper::kHfEvaluation: return "hf_trainer_evaluation";
    case Keeper::kMetricStates: return "torchmetrics_states";
    case Keeper::kNone: break;
  }
  return "";
}

const char* KeeperFix(Keeper k) {
  switch (k) {
    case Keeper::kHfEvaluation:
      return "Hugging Face's Trainer keeps every evaluation batch's logits (and labels) on "
             "the device until the evaluation ends, whenever compute_metrics is given: set "
             "TrainingArguments(eval_accumulation_steps=N) to move them to the host every N "
             "batches, shrink them before they are kept with preprocess_logits_for_metrics "
             "(for example to logits.argmax(-1)), or leave out compute_metrics where the "
             "loss is all you need.";
    case Keeper::kMetricStates:
      return "A torchmetrics metric that keeps its inputs (AUROC, AveragePrecision, the "
             "curve metrics, CatMetric, the retrieval metrics) holds every update's tensors "
             "on the device until reset(): call reset() after compute() at each epoch's end "
             "(Lightning does it for a metric object passed to self.log), give curve metrics "
             "a fixed number of thresholds (constant memory), or construct it with "
             "compute_on_cpu=True.";
    case Keeper::kNone: break;
  }
  return "";
}

std::string FixWithKeeper(OomClass cls, Keeper grower, Keeper requester,
                          absl::string_view fix) {
  if (cls == OomClass::kLeak && grower != Keeper::kNone) return KeeperFix(grower);
  if (cls == OomClass::kPeak && requester != Keeper::kNone) {
    return absl::StrCat("The request that failed was made by ", KeeperName(requester),
                        " for what it keeps. ", KeeperFix(requester), " Otherwise: ", fix);
  }
  return std::string(fix);
}

}  // namespace gpumem::report
