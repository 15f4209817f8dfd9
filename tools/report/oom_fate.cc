#include "tools/report/oom_fate.h"

#include "absl/strings/match.h"
#include "profiler/trace_format.h"

namespace gpumem::report {

bool OomRecovered(const OomPoint& oom, const Steps& steps) {
  // A step end with no allocation between it and the OOM is the step's annotation closing
  // as the exception unwinds (PyTorch's Optimizer.step range), not a step the program
  // finished after catching it.
  const std::size_t step = steps.StepOf(oom.index);
  const bool step_ended_after = step < steps.ends.size() &&
                                oom.first_alloc_after < steps.ends[step];
  return step_ended_after || oom.allocs_after >= kAllocsAfterRecovery;
}

std::optional<std::int64_t> DiedOfOomAt(const trace::Trace& trace) {
  for (const trace::Annotation& a : trace.annotations) {
    if (absl::StartsWith(a.name, format::kDiedOfOomNote)) return a.time_us;
  }
  return std::nullopt;
}

std::optional<std::size_t> FatalOom(const std::vector<OomPoint>& ooms, const Steps& steps,
                                    std::optional<std::int64_t> died_of_oom_at) {
  if (died_of_oom_at) {
    for (std::size_t i = ooms.size(); i-- > 0;) {
      if (ooms[i].time_us <= *died_of_oom_at) return i;
    }
    return std::nullopt;
  }
  if (ooms.empty() || OomRecovered(ooms.back(), steps)) return std::nullopt;
  return ooms.size() - 1;
}

}  // namespace gpumem::report
