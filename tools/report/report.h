// The whole diagnosis of one trace: steps, timeline, leak suspects, OOM explanations and
// the projected OOM step. Reporters (terminal, JSON, HTML) only format this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/report/cache_pressure.h"
#include "tools/report/failed_outside.h"
#include "tools/report/held_outside.h"
#include "tools/report/leaks.h"
#include "tools/report/oom_explain.h"
#include "tools/report/outside_allocator.h"
#include "tools/report/sites.h"
#include "tools/report/steps.h"
#include "tools/report/timeline.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

struct ReportOptions {
  std::optional<std::uint64_t> capacity;  // --capacity; else the trace's, if it has one
  std::optional<StepSite> step_site;
  std::size_t series_points = 2000;
  bool replay_fragmentation = true;  // replay through gpumem to show what it would do
  // The CUPTI tracer's trace of the same process (NAME.cupti.gpumem), or null: the device
  // memory other libraries took outside the allocator.
  const trace::Trace* cupti = nullptr;
  Progress progress;
};

struct Report {
  const trace::Trace* trace = nullptr;
  SiteTable sites;
  Steps steps;
  Timeline timeline;
  LeakAnalysis leaks;
  std::vector<OomExplanation> ooms;
  std::optional<std::size_t> fatal_oom;  // index into ooms: the OOM that ended the run
  std::size_t recovered_ooms = 0;        // OOMs the program caught and went on from
  std::vector<FailedOutside> failed_outside;  // failed device-memory calls of other libraries
  // Index into failed_outside: the failure that ended the run, after any OOM.
  std::optional<std::size_t> fatal_failed_outside;
  // The line whose unusual libraries' memory held most where the run died of memory (a
  // failed outside call, an OOM) or else at its end, by the CUPTI trace, and its growth
  // over the step ends: a leak outside the allocator where it grew.
  UnusualHolder outside_holder;
  std::optional<std::uint64_t> capacity;  // at the trace's end, on the main device
  std::string capacity_source;  // "--capacity", "trace: <what set it>", or empty
  std::optional<std::size_t> projected_oom_step;  // 0-based
  // 0-based: where the leak outside the allocator (outside_holder) would fill the device,
  // for a run that did not die of memory (ProjectOutsideOomStep).
  std::optional<std::size_t> outside_projected_oom_step;
  OutsideAllocator outside;  // device memory outside the allocator, at the peak and the end
  // A run that lived with its cache pressed against the cap by pieces (fragmentation).
  std::optional<CachePressure> cache_pressure;
  std::vector<std::string> warnings;

  explicit Report(const trace::Trace& t) : trace(&t), sites(t) {}
};

// `trace` must outlive the report (a temporary would not: refused).
Report BuildReport(const trace::Trace& trace, const ReportOptions& options);
Report BuildReport(trace::Trace&& trace, const ReportOptions& options) = delete;

// Frames of a stack, innermost first, as "file:line function".
std::vector<std::string> StackNames(const trace::Trace& trace, std::uint32_t stack);

}  // namespace gpumem::report
