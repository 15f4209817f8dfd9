// The OOM that ended a run, classed again once the memory outside the allocator at it is
// known (FindOutsideAllocator): where the allocator's budget had room and the device did
// not, what other processes and this process's unusual libraries held took it
// (report::HeldOutsideExplains). A leak stays a leak.
#pragma once

#include "tools/report/oom_explain.h"
#include "tools/report/outside_allocator.h"

namespace gpumem::report {

// The line whose driver calls held most of what libraries other than the allocator,
// NCCL, cuBLAS and cuDNN held on `device` at `time_us` (the main trace's clock), by the
// CUPTI trace beside `main`; empty where none held any.
std::string UnusualLibrarySite(const trace::Trace& main, const trace::Trace& cupti, int device,
                               std::int64_t time_us);

// `at_oom`: the outside figures taken at `x`'s OOM; `library_site`: UnusualLibrarySite
// there (or empty).
void ExplainHeldOutside(const OutsideMoment& at_oom, const std::string& library_site,
                        OomExplanation* x);

}  // namespace gpumem::report
