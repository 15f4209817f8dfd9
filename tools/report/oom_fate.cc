#include "tools/report/oom_fate.h"

namespace gpumem::report {

bool OomRecovered(const OomPoint& oom, const Steps& steps) {
  const bool step_ended_after = steps.StepOf(oom.index) < steps.ends.size();
  return step_ended_after || oom.allocs_after >= kAllocsAfterRecovery;
}

std::optional<std::size_t> FatalOom(const std::vector<OomPoint>& ooms, const Steps& steps) {
  if (ooms.empty() || OomRecovered(ooms.back(), steps)) return std::nullopt;
  return ooms.size() - 1;
}

}  // namespace gpumem::report
