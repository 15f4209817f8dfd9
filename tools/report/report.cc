#include "tools/report/report.h"

#include "absl/strings/str_cat.h"

namespace gpumem::report {

std::vector<std::string> StackNames(const trace::Trace& trace, std::uint32_t stack) {
  std::vector<std::string> out;
  if (stack >= trace.stacks.size()) return out;
  for (std::uint32_t f : trace.stacks[stack]) out.push_back(FrameName(trace.frames[f]));
  return out;
}

Report BuildReport(const trace::Trace& trace, const ReportOptions& options) {
  Report r(trace);
  r.steps = FindSteps(trace, options.step_site, r.sites.common_dir());
  r.timeline = BuildTimeline(trace, r.sites, r.steps, options.series_points, options.progress);
  r.leaks = FindLeaks(r.timeline, r.sites, r.steps);
  if (options.capacity) {
    r.capacity = options.capacity;
    r.capacity_source = "--capacity";
  } else if (trace.device_capacity) {
    r.capacity = trace.device_capacity;
    r.capacity_source = "trace";
  }
  if (r.capacity) r.projected_oom_step = ProjectOomStep(r.timeline, r.steps, r.leaks, *r.capacity);

  std::optional<ReplayOutcome> replay;
  if (options.replay_fragmentation && !r.timeline.ooms.empty()) {
    // Only worth the time when some OOM looks like fragmentation.
    std::vector<OomExplanation> first = ExplainOoms(r.timeline, r.leaks, r.capacity, std::nullopt);
    for (const OomExplanation& x : first) {
      if (x.cls == OomClass::kFragmentation) {
        replay = ReplayThroughGpumem(trace, x.capacity, x.at.index);
        break;
      }
    }
  }
  r.ooms = ExplainOoms(r.timeline, r.leaks, r.capacity, replay);

  r.warnings = trace.warnings;
  if (r.timeline.unmatched_frees > 0) {
    r.warnings.push_back(absl::StrCat(r.timeline.unmatched_frees,
                                      " frees of blocks the trace never allocated (recording "
                                      "started mid-run); they are ignored"));
  }
  if (r.steps.method == StepMethod::kNone) {
    r.warnings.push_back("no step boundaries found (no step markers, no Optimizer.step "
                         "annotations, no repeating pattern): leak detection needs steps; "
                         "try --step-site FILE:LINE");
  }
  return r;
}

}  // namespace gpumem::report
