// The smallest device at which a policy still replays a trace to the end: the simulated
// form of "the smallest memory cap at which training still completes" (issue 4), found by
// bisection between the trace's peak allocated (nothing can do with less) and what the
// policy reserves without a cap (it needs no more).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/replay/replayer.h"

namespace gpumem::replay {

struct MinCapResult {
  std::uint64_t min_cap = 0;        // the smallest cap found that completes
  std::uint64_t failed_cap = 0;     // the largest cap found that OOMs (0: none tried)
  std::uint64_t peak_allocated = 0;
  std::uint64_t uncapped_reserved = 0;
  std::size_t replays = 0;
  double ratio() const {
    return peak_allocated == 0 ? 0 : static_cast<double>(min_cap) / peak_allocated;
  }
};

// Bisects until failed_cap and min_cap are `resolution` bytes apart or closer. A policy
// need not be monotonic in the cap (more room can change its layout), so this is the
// boundary bisection finds, checked on both sides, not a proof that no smaller cap works.
// `progress` (optional) is told of each replay's cap and outcome.
absl::StatusOr<MinCapResult> FindMinCap(
    const trace::Trace& trace, absl::string_view policy, const ReplayOptions& options,
    std::uint64_t resolution = std::uint64_t{2} << 20,
    const std::function<void(std::uint64_t cap, bool completed)>& progress = {});

}  // namespace gpumem::replay
