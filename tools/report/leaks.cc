#include "tools/report/leaks.h"

#include <algorithm>
#include <cmath>

namespace gpumem::report {
namespace {

// Thresholds. A suspect must grow steadily (a good straight-line fit, rising at most
// step ends) and by an amount that matters: a share of the peak, or at least 1 MiB.
constexpr std::size_t kMinSamples = 4;
constexpr double kMinR2 = 0.8;
constexpr double kMinRisingShare = 0.7;
constexpr double kMinGrowthShareOfPeak = 0.005;
constexpr std::uint64_t kMinGrowthBytes = 1 << 20;

}  // namespace

LinearFit FitLine(const std::vector<double>& x, const std::vector<double>& y) {
  LinearFit fit;
  const double n = static_cast<double>(x.size());
  if (x.size() < 2) return fit;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0) return fit;
  fit.slope = sxy / sxx;
  fit.intercept = my - fit.slope * mx;
  fit.r2 = syy == 0 ? 0 : (sxy * sxy) / (sxx * syy);
  return fit;
}

LeakAnalysis FindLeaks(const Timeline& timeline, const SiteTable& sites, const Steps& steps) {
  LeakAnalysis out;
  const std::size_t samples = timeline.sample_step.size();
  // The first step end carries one-off state (optimizer state, caches): skip it when
  // there are enough steps to spare one.
  const std::size_t first = samples > kMinSamples ? 1 : 0;
  if (samples - first < kMinSamples) {
    out.why_none = "too few step ends to measure growth (need 4)";
    return out;
  }
  out.samples_used = samples - first;
  std::vector<double> x;
  for (std::size_t j = first; j < samples; ++j) x.push_back(static_cast<double>(timeline.sample_step[j]));
  const double min_growth =
      std::max<double>(kMinGrowthBytes, kMinGrowthShareOfPeak * static_cast<double>(timeline.peak_allocated));
  for (std::uint32_t s = 0; s < timeline.site_samples.size(); ++s) {
    const std::vector<std::uint64_t>& live = timeline.site_samples[s];
    if (live.size() != samples || live.back() <= live[first]) continue;
    const double growth = static_cast<double>(live.back() - live[first]);
    if (growth < min_growth) continue;
    std::vector<double> y;
    std::size_t rising = 0;
    for (std::size_t j = first; j < samples; ++j) {
      y.push_back(static_cast<double>(live[j]));
      if (j > first && live[j] > live[j - 1]) ++rising;
    }
    const double rising_share = static_cast<double>(rising) / static_cast<double>(samples - first - 1);
    LinearFit fit = FitLine(x, y);
    if (fit.slope <= 0 || fit.r2 < kMinR2 || rising_share < kMinRisingShare) continue;
    LeakSuspect suspect;
    suspect.site = s;
    suspect.name = sites.name(s);
    suspect.bytes_per_step = fit.slope;
    suspect.r2 = fit.r2;
    suspect.rising_share = rising_share;
    suspect.growth_bytes = live.back() - live[first];
    suspect.live_at_last_sample = live.back();
    const SiteTotals& totals = timeline.sites[s];
    suspect.blocks_never_freed = totals.live_blocks_at_end;
    suspect.bytes_never_freed = totals.live_bytes_at_end;
    suspect.stack = totals.leaked_stack != 0 ? totals.leaked_stack : sites.example_stack(s);
    suspect.first_step = steps.StepOf(totals.first_event);
    out.suspects.push_back(std::move(suspect));
  }
  std::sort(out.suspects.begin(), out.suspects.end(),
            [](const LeakSuspect& a, const LeakSuspect& b) { return a.bytes_per_step > b.bytes_per_step; });
  for (const LeakSuspect& s : out.suspects) out.bytes_per_step += s.bytes_per_step;
  return out;
}

std::optional<std::size_t> ProjectOomStep(const Timeline& timeline, const Steps& steps,
                                          const LeakAnalysis& leaks, std::uint64_t capacity) {
  if (leaks.suspects.empty() || leaks.bytes_per_step <= 0 || timeline.sample_step.empty()) {
    return std::nullopt;
  }
  // Start from the last step whose end was seen, and its highest point within the step.
  const std::size_t last = timeline.sample_step.back();
  const std::uint64_t peak = timeline.step_peak_allocated[std::min(last, timeline.step_peak_allocated.size() - 1)];
  (void)steps;
  if (peak >= capacity) return last;
  const double steps_left = std::ceil(static_cast<double>(capacity - peak) / leaks.bytes_per_step);
  if (steps_left > 1e12) return std::nullopt;
  return last + static_cast<std::size_t>(steps_left);
}

}  // namespace gpumem::report
