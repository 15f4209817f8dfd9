#include "tools/report/cache_pressure.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {
namespace {
// PyTorch's allocator on steady shapes holds 1.0-1.2x; on batches of varying length up to
// 2.5x. gpumem's allocator and expandable segments hold ~1.02x.
constexpr double kRatio = 1.2;
constexpr double kShareOfCap = 0.9;
}  // namespace

std::optional<CachePressure> FindCachePressure(const Timeline& timeline,
                                               std::optional<std::uint64_t> capacity,
                                               bool died_of_memory) {
  if (died_of_memory || !timeline.has_segments || !capacity || *capacity == 0 ||
      timeline.peak_allocated == 0) {
    return std::nullopt;
  }
  // Each device's cache presses against its own cap.
  std::vector<CachePressure> candidates;
  if (timeline.DevicesUsed() < 2) {
    candidates.push_back({timeline.peak_reserved, timeline.peak_allocated, *capacity});
  } else {
    for (std::size_t d = 0; d < timeline.devices.size(); ++d) {
      const Timeline::DevicePeaks& peaks = timeline.devices[d];
      if (peaks.allocated == 0) continue;
      candidates.push_back({peaks.reserved, peaks.allocated, *capacity, static_cast<std::int32_t>(d)});
    }
  }
  std::optional<CachePressure> pressed;
  for (const CachePressure& p : candidates) {
    if (p.ratio() < kRatio || p.peak_reserved < kShareOfCap * static_cast<double>(*capacity)) continue;
    if (!pressed || p.peak_reserved > pressed->peak_reserved) pressed = p;
  }
  return pressed;
}

std::string CachePressureText(const CachePressure& p) {
  return absl::StrFormat(
      "the allocator reserved up to %s%s, %.2fx the most ever allocated at once (%s) and "
      "%.0f%% of the cap (%s): its cache held memory in pieces that the run's requests "
      "could not use, pressed against the cap (fragmentation). The run lived, but a larger "
      "batch or a longer input would fail with that memory free. gpumem's allocator "
      "(`gpumem run` without --profile-only) or "
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True keeps reserved near allocated.",
      Bytes(p.peak_reserved), p.device < 0 ? "" : absl::StrCat(" on device ", p.device),
      p.ratio(), Bytes(p.peak_allocated),
      100.0 * static_cast<double>(p.peak_reserved) / static_cast<double>(p.capacity),
      Bytes(p.capacity));
}

}  // namespace gpumem::report
