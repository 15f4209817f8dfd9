// Which OOMs the program survived and which one ended the run. PyTorch code catches some
// OOMs on purpose (cuDNN tries workspaces until one fits, batch-size finders double the
// batch until it fails): those are recovered, and the diagnosis is about the OOM the
// process died of, if it died of one.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "tools/report/steps.h"
#include "tools/report/timeline.h"

namespace gpumem::report {

// Allocations that succeed after an OOM before the trace ends: more than a dying
// process makes while its exception unwinds.
inline constexpr std::uint64_t kAllocsAfterRecovery = 32;

// Survived: a step ended after it, or the program went on allocating.
bool OomRecovered(const OomPoint& oom, const Steps& steps);

// The OOM that ended the run: the last one, unless it was survived too.
std::optional<std::size_t> FatalOom(const std::vector<OomPoint>& ooms, const Steps& steps);

}  // namespace gpumem::report
