// Step boundaries: where one training iteration ends and the next begins. Leak detection
// samples live memory at these points, where a healthy loop is back to the same state.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

enum class StepMethod {
  kNone,         // no steps found: the trace is treated as one step
  kStepEvents,   // the trace's own step markers (gpumem traces)
  kAnnotations,  // PyTorch's external annotations (Optimizer.step / zero_grad ranges)
  kStepSite,     // --step-site FILE:LINE: each allocation from that line starts a step
  kInferred,     // the repeating pattern of the allocation stream
};

const char* StepMethodName(StepMethod method);

struct Steps {
  StepMethod method = StepMethod::kNone;
  std::size_t count = 0;  // steps in the trace (some may have no known end)
  // Event positions at which a step ends, ascending: the state at the end of a step is
  // the state after events [0, end). ends.size() <= count.
  std::vector<std::size_t> ends;
  std::string detail;  // e.g. the annotation name or the anchor site, for the reader
  // kStepEvents: what marked them: "optimizer step hooks", "gpumem.step()", both, or
  // "unrecorded" (traces from before the source was recorded).
  std::string source;
  // kStepEvents: of the first ends, how many were marked by calls of the model with grad
  // before any backward pass: perhaps parts of the first iteration, whose graphs wait for
  // its backward, rather than steps.
  std::size_t first_iteration_marks = 0;

  // The step that event `index` belongs to (0-based).
  std::size_t StepOf(std::size_t index) const;
};

// "FILE:LINE": FILE matches a frame's file name by suffix.
struct StepSite {
  std::string file;
  int line = 0;
};
absl::StatusOr<StepSite> ParseStepSite(const std::string& text);

// `site_dir`: the folder site names are shown relative to (SiteTable::common_dir()), so
// that an inferred step's anchor is named as its site is.
Steps FindSteps(const trace::Trace& trace, const std::optional<StepSite>& step_site,
                absl::string_view site_dir = "");

}  // namespace gpumem::report
