// The OOM that ended a run, classed again once the memory outside the allocator at it is
// known (FindOutsideAllocator): where the allocator's budget had room and the device did
// not, what other processes and this process's unusual libraries held took it
// (report::HeldOutsideExplains). A leak stays a leak.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tools/report/oom_explain.h"
#include "tools/report/outside_allocator.h"
#include "tools/report/steps.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {

// Memory outside the allocator on a device at a moment, by the CUPTI trace beside the main
// one: what grew fastest over the step ends before it (an unusual library's line, or a
// known library's memory as a whole, named by its fastest-growing user line: NCCL's with a
// process group made each step), or where nothing grew, the line whose driver calls held
// most of what libraries other than the allocator, NCCL, cuBLAS and cuDNN held (the
// unusual libraries, kOther).
struct UnusualHolder {
  OutsideLibrary library = OutsideLibrary::kOther;
  std::string site;              // "file:line function"; empty where none held any
  std::uint64_t bytes = 0;       // what it held at the moment
  std::optional<Growth> growth;  // steady growth over the step ends (SteadyGrowth)
  std::size_t samples = 0;       // step ends before the moment
};
// `time_us` on the main trace's clock.
UnusualHolder FindUnusualHolder(const trace::Trace& main, const trace::Trace& cupti,
                                const Steps& steps, int device, std::int64_t time_us);

// OutsideHolderName: "f.py:3 g" for an unusual library, "NCCL's memory for f.py:3 g".
std::string HolderName(const UnusualHolder& holder);

// "leak outside the allocator at f.py:3 g (+256.00 MiB/step)" ("leak outside the
// allocator: NCCL's memory for f.py:3 g (+...)") where the holder's memory grew;
// empty where it did not.
std::string OutsideLeakPhrase(const UnusualHolder& holder);

// The fix for the library's failed call that ended a run: where the holder's memory grew,
// that leak's (OutsideLeakFix), else the usual one (FailedOutsideFix).
std::string FailedOutsideFixFor(const UnusualHolder& holder);

// The step (0-based) in which a leak outside the allocator, growing at its rate, would
// leave the device no free memory: from the driver's free bytes at `end`, after
// `steps_done` steps. nullopt without a leak or the driver's figures.
std::optional<std::size_t> ProjectOutsideOomStep(const UnusualHolder& holder,
                                                 const OutsideMoment& end,
                                                 std::size_t steps_done);

// `at_oom`: the outside figures taken at `x`'s OOM; `holder`: FindUnusualHolder there (or
// none). Where that holder's memory grew steadily, the OOM is a leak outside the
// allocator at its line (a known library's memory counts as held outside only then).
void ExplainHeldOutside(const OutsideMoment& at_oom, const UnusualHolder& holder,
                        OomExplanation* x);

}  // namespace gpumem::report
