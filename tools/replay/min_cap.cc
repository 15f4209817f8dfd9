#include "tools/replay/min_cap.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"

namespace gpumem::replay {

absl::StatusOr<MinCapResult> FindMinCap(
    const trace::Trace& trace, absl::string_view policy, const ReplayOptions& options,
    std::uint64_t resolution,
    const std::function<void(std::uint64_t cap, bool completed)>& progress) {
  resolution = std::max<std::uint64_t>(resolution, 1);
  MinCapResult result;
  ReplayOptions run = options;
  // Uncapped first: the upper bound, and any error in the trace shows here.
  run.capacity.reset();
  absl::StatusOr<ReplayResult> free_run = Replay(trace, policy, run);
  if (!free_run.ok()) return free_run.status();
  ++result.replays;
  result.peak_allocated = free_run->peak_allocated;
  result.uncapped_reserved = free_run->peak_reserved;
  auto completes = [&](std::uint64_t cap) -> absl::StatusOr<bool> {
    run.capacity = cap;
    absl::StatusOr<ReplayResult> r = Replay(trace, policy, run);
    if (!r.ok()) return r.status();
    ++result.replays;
    const bool ok = !r->oom.has_value();
    if (progress) progress(cap, ok);
    return ok;
  };
  // Invariant: `hi` completes; `lo` fails or is below what any policy could do.
  std::uint64_t hi = std::max(free_run->peak_reserved, result.peak_allocated);
  std::uint64_t lo = result.peak_allocated > 0 ? result.peak_allocated - 1 : 0;
  // A policy may lay memory out differently under a cap (gpumem sizes its address ranges
  // and growth budget by it), so its uncapped peak is not always enough: widen a little.
  for (int widen = 0;; ++widen) {
    absl::StatusOr<bool> ok = completes(hi);
    if (!ok.ok()) return ok.status();
    if (*ok) break;
    if (widen == 4) {
      return absl::InternalError(absl::StrCat(
          policy, " does not complete ", trace.source, " even with ", hi, " bytes"));
    }
    lo = hi;
    result.failed_cap = hi;
    hi += hi / 8;
  }
  while (hi - lo > resolution) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    absl::StatusOr<bool> ok = completes(mid);
    if (!ok.ok()) return ok.status();
    if (*ok) {
      hi = mid;
    } else {
      lo = mid;
      result.failed_cap = mid;
    }
  }
  result.min_cap = hi;
  return result;
}

}  // namespace gpumem::replay
