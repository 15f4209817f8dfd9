#include "tools/report/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tools/report/capacity.h"
#include "tools/report/held_outside.h"
#include "tools/report/oom_fate.h"
#include "tools/trace/unpaired_events.h"

namespace gpumem::report {

std::vector<std::string> StackNames(const trace::Trace& trace, std::uint32_t stack) {
  std::vector<std::string> out;
  if (stack >= trace.stacks.size()) return out;
  for (std::uint32_t f : trace.stacks[stack]) out.push_back(FrameName(trace.frames[f]));
  return out;
}

namespace {

std::vector<std::optional<KnownCapacity>> OomCapacities(const Report& r,
                                                        std::optional<std::uint64_t> given) {
  std::vector<std::optional<KnownCapacity>> out;
  for (const OomPoint& p : r.timeline.ooms) {
    std::optional<KnownCapacity> cap = CapacityAt(*r.trace, p.device, p.time_us, given);
    out.push_back(cap ? cap : CapFromOom(p, r.timeline));
  }
  return out;
}

// The cap the projection runs to: the main device's at the end, else one its first OOM
// tells of.
std::optional<KnownCapacity> ProjectionCapacity(const Report& r, std::optional<std::uint64_t> given) {
  const std::int32_t device = MainDevice(*r.trace);
  if (std::optional<KnownCapacity> cap = FinalCapacity(*r.trace, device, given)) return cap;
  for (const OomPoint& p : r.timeline.ooms) {
    if (p.device == device) return CapFromOom(p, r.timeline);
  }
  return std::nullopt;
}

// Only worth the time when the OOM that ended the run (explained without it) looks like
// fragmentation.
std::optional<ReplayOutcome> ReplayIfFragmented(const Report& r) {
  for (const OomExplanation& x : r.ooms) {
    if (x.fatal && x.cls == OomClass::kFragmentation) {
      return ReplayThroughGpumem(*r.trace, x.capacity, x.at.index);
    }
  }
  return std::nullopt;
}

// Where the run died of memory before any step boundary, --step-site rarely helps: the
// OOM came while the model was built or in its first step.
std::string NoStepsWarning(const Report& r) {
  const std::string why =
      "no step boundaries found (no step markers, no Optimizer.step annotations, no "
      "allocation pattern that repeats once a step): leak detection needs steps; ";
  if (r.fatal_oom || r.fatal_failed_outside) {
    return why + "the run died of memory before any step ended, so its OOM is judged on "
                 "what was live at it (a run that did go through steps: --step-site "
                 "FILE:LINE)";
  }
  return why + "try --step-site FILE:LINE";
}

void AddWarnings(Report& r) {
  r.warnings = r.trace->warnings;
  if (r.timeline.unmatched_frees > 0) {
    r.warnings.push_back(trace::UnmatchedFreesWarning(r.timeline.unmatched_frees));
  }
  if (r.timeline.reused_addresses > 0) {
    r.warnings.push_back(trace::ReusedAddressesWarning(r.timeline.reused_addresses));
  }
  if (r.steps.method == StepMethod::kNone) r.warnings.push_back(NoStepsWarning(r));
}

// A failed outside call that ended the run came after every OOM: the run died of it, not
// of the OOM before it.
void TakeFailedOutside(Report* r, const trace::Trace* cupti) {
  r->failed_outside = ListFailedOutside(*r->trace, cupti, r->sites, r->steps, r->timeline);
  if (r->failed_outside.empty() || !r->failed_outside.back().ended_the_run) return;
  r->fatal_failed_outside = r->failed_outside.size() - 1;
  if (!r->fatal_oom) return;
  r->ooms[*r->fatal_oom].fatal = false;
  r->fatal_oom.reset();
}

// The step ends before the OOM that ended the run (all of them where none did).
std::size_t SamplesBeforeDeath(const Timeline& timeline, const Steps& steps,
                               std::optional<std::int64_t> died_of_oom_at) {
  const std::optional<std::size_t> fatal = FatalOom(timeline.ooms, steps, died_of_oom_at);
  if (!fatal) return timeline.sample_step.size();
  const std::size_t step = timeline.ooms[*fatal].step;
  return static_cast<std::size_t>(
      std::lower_bound(timeline.sample_step.begin(), timeline.sample_step.end(), step) -
      timeline.sample_step.begin());
}

// Where the run died of memory, if it did: the outside figures are taken there.
std::optional<OutsideEnd> Death(const Report& r) {
  if (r.fatal_failed_outside) {
    const trace::FailedAllocation& f = r.failed_outside[*r.fatal_failed_outside].call;
    return OutsideEnd{f.device, f.time_us, f.device_free, "failed allocation"};
  }
  if (!r.fatal_oom) return std::nullopt;
  const OomPoint& p = r.ooms[*r.fatal_oom].at;
  std::optional<std::uint64_t> free;
  if (p.device_free != 0) free = p.device_free;
  return OutsideEnd{p.device, p.time_us, free, "OOM"};
}

// The unusual libraries' top holder where the run died of memory (`death`), else at its
// end on the main device.
UnusualHolder FindOutsideHolder(const Report& r, const trace::Trace& cupti,
                                const std::optional<OutsideEnd>& death) {
  const trace::Trace& t = *r.trace;
  if (t.events.empty()) return {};
  return death ? FindUnusualHolder(t, cupti, r.steps, death->device, death->time_us)
               : FindUnusualHolder(t, cupti, r.steps, MainDevice(t), t.events.back().time_us);
}

}  // namespace

Report BuildReport(const trace::Trace& trace, const ReportOptions& options) {
  Report r(trace);
  r.steps = FindSteps(trace, options.step_site, r.sites.common_dir());
  r.timeline = BuildTimeline(trace, r.sites, r.steps, options.series_points, options.progress);
  const std::optional<std::int64_t> died_of_oom_at = DiedOfOomAt(trace);
  r.leaks = FindLeaks(r.timeline, r.sites, r.steps,
                      SamplesBeforeDeath(r.timeline, r.steps, died_of_oom_at));
  NameKeepers(trace, &r.leaks);
  if (std::optional<KnownCapacity> cap = ProjectionCapacity(r, options.capacity)) {
    r.capacity = cap->bytes;
    r.capacity_source = cap->source;
    r.projected_oom_step = ProjectOomStep(r.timeline, r.leaks, *r.capacity);
  }
  const std::vector<std::optional<KnownCapacity>> caps = OomCapacities(r, options.capacity);
  r.ooms = ExplainOoms(r.timeline, r.leaks, r.steps, caps, std::nullopt, died_of_oom_at);
  if (options.replay_fragmentation) {
    if (std::optional<ReplayOutcome> replay = ReplayIfFragmented(r)) {
      r.ooms = ExplainOoms(r.timeline, r.leaks, r.steps, caps, replay, died_of_oom_at);
    }
  }
  for (std::size_t i = 0; i < r.ooms.size(); ++i) {
    if (r.ooms[i].fatal) r.fatal_oom = i;
    r.recovered_ooms += r.ooms[i].recovered;
  }
  TakeFailedOutside(&r, options.cupti);
  const std::optional<OutsideEnd> death = Death(r);
  if (options.cupti != nullptr) r.outside_holder = FindOutsideHolder(r, *options.cupti, death);
  r.outside = FindOutsideAllocator(trace, options.cupti, MainDevice(trace), death);
  if (r.fatal_oom && r.outside.end && r.outside.end_is == "OOM" &&
      r.ooms[*r.fatal_oom].at.device == r.outside.device) {
    ExplainHeldOutside(*r.outside.end, r.outside_holder, &r.ooms[*r.fatal_oom]);
  }
  if (!death && r.outside.end) {
    r.outside_projected_oom_step =
        ProjectOutsideOomStep(r.outside_holder, *r.outside.end, r.steps.count);
  }
  r.cache_pressure = FindCachePressure(r.timeline, r.capacity, death.has_value());
  AddWarnings(r);
  return r;
}

}  // namespace gpumem::report
