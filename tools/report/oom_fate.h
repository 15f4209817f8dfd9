// Which OOMs the program survived and which one ended the run. PyTorch code catches some
// OOMs on purpose (cuDNN tries workspaces until one fits, batch-size finders double the
// batch until it fails): those are recovered, and the diagnosis is about the OOM the
// process died of, if it died of one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "tools/report/steps.h"
#include "tools/report/timeline.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

// Allocations that succeed after an OOM before the trace ends: more than a dying
// process makes while its exception unwinds.
inline constexpr std::uint64_t kAllocsAfterRecovery = 32;

// Survived: a step ended after it, the program allocating before that end, or the
// program went on allocating.
bool OomRecovered(const OomPoint& oom, const Steps& steps);

// When the program said it died of an uncaught out-of-memory error (the Python package's
// note, format::kDiedOfOomNote), if it did.
std::optional<std::int64_t> DiedOfOomAt(const trace::Trace& trace);

// The OOM that ended the run: the last one before the program said it died of one (other
// threads may have gone on allocating and stepping while its error reached the top);
// without that note, the last one unless it was survived too.
std::optional<std::size_t> FatalOom(const std::vector<OomPoint>& ooms, const Steps& steps,
                                    std::optional<std::int64_t> died_of_oom_at);

}  // namespace gpumem::report
