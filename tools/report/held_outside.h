// The OOM that ended a run, classed again once the memory outside the allocator at it is
// known (FindOutsideAllocator): where the allocator's budget had room and the device did
// not, what other processes and this process's unusual libraries held took it
// (report::HeldOutsideExplains). A leak stays a leak.
#pragma once

#include "tools/report/oom_explain.h"
#include "tools/report/outside_allocator.h"

namespace gpumem::report {

// `at_oom`: the outside figures taken at `x`'s OOM.
void ExplainHeldOutside(const OutsideMoment& at_oom, OomExplanation* x);

}  // namespace gpumem::report
