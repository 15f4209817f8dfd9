#include "tools/report/library_keepers.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpumem::report {

Keeper KeeperOfFrame(absl::string_view filename, absl::string_view function) {
  // The evaluation loop's container, which concatenates each batch onto what it holds
  // (the default) until eval_accumulation_steps batches have passed.
  if (absl::EndsWith(filename, "transformers/trainer_pt_utils.py") &&
      (absl::StartsWith(function, "EvalLoopContainer") || function == "nested_concat" ||
       function == "torch_pad_and_concatenate")) {
    return Keeper::kHfEvaluation;
  }
  // A metric's own code: the memory it allocates and keeps is its state.
  if (absl::StrContains(filename, "torchmetrics/")) return Keeper::kMetricStates;
  return Keeper::kNone;
}

const char* KeeperName(Keeper k) {
  switch (k) {
    case Keeper::kHfEvaluation: return "Hugging Face's Trainer (its evaluation loop)";
    case Keeper::kMetricStates: return "a torchmetrics metric's states";
    case Keeper::kNone: break;
  }
  return "";
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
    return absl::StrCat("The request that failed was ", KeeperName(requester),
                        " gathering what it keeps. ", KeeperFix(requester), " Otherwise: ", fix);
  }
  return std::string(fix);
}

}  // namespace gpumem::report
