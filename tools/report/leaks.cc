#include "tools/report/leaks.h"

#include <algorithm>
#include <cmath>

namespace gpumem::report {

std::string SuspectText(const LeakSuspect& suspect) {
  return SiteWithCall(suspect.name, suspect.kept_through) + KeptByText(suspect.keeper);
}

void NameKeepers(const trace::Trace& trace, LeakAnalysis* leaks) {
  for (LeakSuspect& s : leaks->suspects) s.keeper = KeeperOfStack(trace, s.stack);
}

LeakAnalysis FindLeaks(const Timeline& timeline, const SiteTable& sites, const Steps& steps,
                       std::size_t sample_count) {
  LeakAnalysis out;
  const std::size_t samples = std::min(timeline.sample_step.size(), sample_count);
  // The first step end carries one-off state (optimizer state, caches): skip it when
  // there are enough steps to spare one.
  const std::size_t first = samples > kMinGrowthSamples ? 1 : 0;
  if (samples - first < kMinGrowthSamples) {
    out.why_none = "too few step ends to measure growth (need 4)";
    return out;
  }
  out.samples_used = samples - first;
  std::vector<double> x;
  for (std::size_t j = first; j < samples; ++j) x.push_back(static_cast<double>(timeline.sample_step[j]));
  const double min_growth = MinLeakGrowth(timeline.peak_allocated);
  for (std::uint32_t s = 0; s < timeline.site_samples.size(); ++s) {
    const std::vector<std::uint64_t>& live = timeline.site_samples[s];
    if (live.size() != timeline.sample_step.size()) continue;
    const std::optional<Growth> growth = RecentSteadyGrowth(
        x, absl::MakeConstSpan(live).subspan(first, samples - first), min_growth);
    if (!growth) continue;
    LeakSuspect suspect;
    suspect.site = s;
    suspect.name = sites.name(s);
    suspect.bytes_per_step = growth->bytes_per_step;
    suspect.r2 = growth->r2;
    suspect.rising_share = growth->rising_share;
    suspect.growth_bytes = growth->grown;
    suspect.live_at_last_sample = live[samples - 1];
    const SiteTotals& totals = timeline.sites[s];
    suspect.blocks_never_freed = totals.live_blocks_at_end;
    suspect.bytes_never_freed = totals.live_bytes_at_end;
    suspect.stack = totals.leaked_stack != 0 ? totals.leaked_stack : sites.example_stack(s);
    suspect.kept_through = totals.kept_through;
    suspect.holds_graph_pools = totals.holds_graph_pools;
    suspect.first_step = steps.StepOf(totals.first_event);
    out.suspects.push_back(std::move(suspect));
  }
  std::sort(out.suspects.begin(), out.suspects.end(),
            [](const LeakSuspect& a, const LeakSuspect& b) { return a.bytes_per_step > b.bytes_per_step; });
  for (const LeakSuspect& s : out.suspects) out.bytes_per_step += s.bytes_per_step;
  return out;
}

std::int32_t LeakDevice(const Timeline& timeline, const LeakAnalysis& leaks) {
  if (leaks.suspects.empty() || timeline.DevicesUsed() < 2) return -1;
  const std::uint32_t site = leaks.suspects.front().site;
  return site < timeline.site_device.size() ? timeline.site_device[site] : -1;
}

double LeakRateOnItsDevice(const Timeline& timeline, const LeakAnalysis& leaks) {
  const std::int32_t device = LeakDevice(timeline, leaks);
  if (device < 0) return leaks.bytes_per_step;
  double rate = 0;
  for (const LeakSuspect& s : leaks.suspects) {
    if (s.site < timeline.site_device.size() && timeline.site_device[s.site] == device) {
      rate += s.bytes_per_step;
    }
  }
  return rate;
}

std::optional<std::size_t> ProjectOomStep(const Timeline& timeline, const LeakAnalysis& leaks,
                                          std::uint64_t capacity) {
  const double rate = LeakRateOnItsDevice(timeline, leaks);
  if (leaks.suspects.empty() || rate <= 0 || timeline.sample_step.empty()) return std::nullopt;
  // Start from the last step whose end was seen, and its highest point within the step.
  const std::size_t last = timeline.sample_step.back();
  const std::uint64_t peak = timeline.StepPeak(LeakDevice(timeline, leaks), last);
  if (peak >= capacity) return last;
  const double steps_left = std::ceil(static_cast<double>(capacity - peak) / rate);
  if (steps_left > 1e12) return std::nullopt;
  return last + static_cast<std::size_t>(steps_left);
}

}  // namespace gpumem::report
