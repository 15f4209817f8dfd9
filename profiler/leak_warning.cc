#include "profiler/leak_warning.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "tools/report/verdict_rules.h"

namespace gpumem {

LeakWarner::LeakWarner(std::size_t steps)
    : steps_(std::min(steps, SiteHistory::kSteps - 1)),
      stopped_steps_(std::min(SiteHistory::kSteps - 1, std::max<std::size_t>(4 * steps_, 16))) {}

namespace {

// The step at which the device's cap is reached at `bytes_per_step`, if one is known.
std::optional<std::uint64_t> ProjectedOomStep(double bytes_per_step, std::uint64_t step,
                                              const LeakWarner::DeviceFigures& device) {
  if (device.cap == 0 || bytes_per_step <= 0) return std::nullopt;
  const double left =
      device.cap > device.step_peak
          ? std::ceil(static_cast<double>(device.cap - device.step_peak) / bytes_per_step)
          : 1.0;
  if (left >= 1e12) return std::nullopt;
  return step + static_cast<std::uint64_t>(std::max(left, 1.0));
}

}  // namespace

std::optional<LeakWarning> LeakWarner::Rising(std::uint64_t key, const SiteHistory::Series& s,
                                              const report::FillLevel& fill,
                                              std::uint64_t step,
                                              const DeviceFigures& device) const {
  const std::size_t n = s.live.size();
  if (n < steps_ + 1) return std::nullopt;
  for (std::size_t i = n - steps_; i < n; ++i) {
    if (s.live[i] <= s.live[i - 1]) return std::nullopt;
  }
  if (fill.Refills(s.live[n - steps_ - 1], s.live.back())) return std::nullopt;
  const std::uint64_t grown = s.live.back() - s.live[n - steps_ - 1];
  if (static_cast<double>(grown) < report::MinLeakGrowth(device.step_peak)) return std::nullopt;
  const std::vector<double> x(s.steps.end() - static_cast<std::ptrdiff_t>(steps_ + 1), s.steps.end());
  std::vector<double> y;
  for (std::size_t i = n - steps_ - 1; i < n; ++i) y.push_back(static_cast<double>(s.live[i]));
  LeakWarning w;
  w.key = key;
  w.bytes_per_step = report::FitLine(x, y).slope;
  w.live = s.live.back();
  w.grown_from = s.live[n - steps_ - 1];
  w.oom_step = ProjectedOomStep(w.bytes_per_step, step, device);
  return w;
}

bool LeakWarner::Judgeable(const SiteHistory::Series& coarse) {
  // Fewer samples cannot be fitted; a shorter span the fine series sees as well.
  return coarse.live.size() >= report::kMinLateGrowthSamples &&
         coarse.steps.back() - coarse.steps.front() >= 2.0 * SiteHistory::kSteps;
}

LeakWarner::Pauses LeakWarner::PausesOf(const SiteHistory::Series& coarse, std::size_t from) {
  Pauses p;
  for (std::size_t i = from + 1; i < coarse.live.size(); ++i) {
    if (coarse.live[i] > coarse.live[i - 1]) {
      p.longest = std::max(p.longest, p.trailing);
      p.trailing = 0;
    } else {
      ++p.trailing;
    }
  }
  return p;
}

bool LeakWarner::PausedPastItsRhythm(const SiteHistory::Series& coarse, std::size_t from) {
  const Pauses p = PausesOf(coarse, from);
  return p.trailing > p.longest + 1;
}

std::optional<LeakWarning> LeakWarner::RisingInSteps(std::uint64_t key,
                                                     const SiteHistory::Series& s,
                                                     const report::FillLevel& fill,
                                                     std::uint64_t step,
                                                     const DeviceFigures& device) const {
  if (!Judgeable(s)) return std::nullopt;
  const std::optional<report::Growth> g =
      report::RecentSteadyGrowth(s.steps, s.live, report::MinLeakGrowth(device.step_peak), &fill);
  if (!g || g->bytes_per_step <= 0 || PausedPastItsRhythm(s, g->from)) return std::nullopt;
  if (const auto w = withdrawn_at_.find(key);
      w != withdrawn_at_.end() && s.steps[g->from] < static_cast<double>(w->second)) {
    return std::nullopt;
  }
  LeakWarning w;
  w.key = key;
  w.bytes_per_step = g->bytes_per_step;
  w.live = s.live.back();
  w.grown_from = s.live[g->from];
  w.oom_step = ProjectedOomStep(w.bytes_per_step, step, device);
  w.in_steps_over = static_cast<std::uint64_t>(s.steps.back() - s.steps[g->from]);
  return w;
}

bool LeakWarner::Moved(const LeakWarning& before, const LeakWarning& now,
                       std::uint64_t step) const {
  if (before.oom_step && now.oom_step) {
    const double left = std::max(1.0, static_cast<double>(*before.oom_step) - static_cast<double>(step));
    const double moved = std::fabs(static_cast<double>(*now.oom_step) - static_cast<double>(*before.oom_step));
    return moved > 0.25 * left;
  }
  if (before.oom_step.has_value() != now.oom_step.has_value()) return true;
  return std::fabs(now.bytes_per_step - before.bytes_per_step) > 0.25 * before.bytes_per_step;
}

bool LeakWarner::DueAgain(const Said& said, std::uint64_t step) const {
  const std::uint64_t wait = std::max<std::uint64_t>(steps_, said.last_step - said.first_step);
  return step >= said.last_step + wait;
}

bool LeakWarner::Stopped(const SiteHistory::Series& s, std::size_t samples) {
  const std::size_t n = s.live.size();
  if (n < samples + 1) return false;
  const std::uint64_t start = s.live[n - samples - 1];
  return std::all_of(s.live.end() - static_cast<std::ptrdiff_t>(samples), s.live.end(),
                     [start](std::uint64_t live) { return live <= start; });
}

std::optional<LeakWarning> LeakWarner::Withdraw(
    std::uint64_t key, std::uint64_t step, const SiteHistory::Series& s,
    const std::optional<SiteHistory::Series>& coarse) {
  const auto said = said_.find(key);
  if (said == said_.end() || !Stopped(s, stopped_steps_)) return std::nullopt;
  // Growth seen in steps is flat over any 20 step ends between its steps: it has stopped
  // once its coarse series has too, for three times its longest pause between rises (a
  // leak at random steps pauses for longer than its usual now and then).
  if (said->second.warning.in_steps_over > 0 &&
      (!coarse ||
       !Stopped(*coarse, std::max(kCoarseStoppedSamples, 3 * PausesOf(*coarse, 0).longest + 1)))) {
    return std::nullopt;
  }
  return WithdrawNow(said, step, s.live.back(), /*fell_back=*/false);
}

LeakWarning LeakWarner::WithdrawNow(absl::flat_hash_map<std::uint64_t, Said>::iterator said,
                                    std::uint64_t step, std::uint64_t live, bool fell_back) {
  LeakWarning withdrawn = said->second.warning;
  withdrawn.withdrawn = true;
  withdrawn.fell_back = fell_back;
  withdrawn.live_when_said = withdrawn.live;
  withdrawn.live = live;
  withdrawn_at_[said->first] = step;
  said_.erase(said);
  return withdrawn;
}

bool LeakWarner::GaveBackItsGrowth(const LeakWarning& w, const SiteHistory::Series& s) {
  if (s.live.empty() || w.live <= w.grown_from) return false;
  const double grown = static_cast<double>(w.live - w.grown_from);
  return static_cast<double>(s.live.back()) + kGivenBackShare * grown <=
         static_cast<double>(w.live);
}

std::vector<LeakWarning> LeakWarner::WithdrawSinceBetterSource(std::uint64_t step,
                                                              const SiteHistory& history,
                                                              bool switched) {
  std::vector<LeakWarning> out;
  for (auto it = said_.begin(); it != said_.end();) {
    Said& said = it->second;
    if (!switched && said.trial_marks_left == 0) {  // not on trial
      ++it;
      continue;
    }
    const SiteHistory::Series s = history.Of(it->first);
    const std::uint64_t now = s.live.empty() ? 0 : s.live.back();
    bool withdraw = false;
    if (now < said.warning.live) {
      withdraw = said.warning.given_back = true;
      said.warning.live_when_said = said.warning.live;
    } else if (switched) {
      said.trial_marks_left = kTrialMarks;
      said.trial_baseline.reset();
    } else if (!said.trial_baseline) {
      // A step end's sample is what the step kept (the least it held): the one at the
      // switch still lacks the last stretch of the iteration it ends.
      said.trial_baseline = now;
    } else if (now > *said.trial_baseline) {
      said.trial_marks_left = 0;  // grew under the better source: the warning stands
    } else if (--said.trial_marks_left == 0) {
      withdraw = said.warning.flat_since_switch = true;
    }
    if (!withdraw) {
      ++it;
      continue;
    }
    said.warning.withdrawn = true;
    said.warning.live = now;
    out.push_back(said.warning);
    withdrawn_at_[it->first] = step;
    said_.erase(it++);
  }
  std::sort(out.begin(), out.end(),
            [](const LeakWarning& a, const LeakWarning& b) { return a.key < b.key; });
  return out;
}

std::optional<LeakWarning> LeakWarner::Judge(std::uint64_t key, std::uint64_t step,
                                             const SiteHistory& history,
                                             const DeviceFigures& device) {
  const SiteHistory::Series series = history.Of(key);
  const auto said = said_.find(key);
  if (said != said_.end() && GaveBackItsGrowth(said->second.warning, series)) {
    return WithdrawNow(said, step, series.live.back(), /*fell_back=*/true);
  }
  const report::FillLevel fill = history.FillOf(key);
  std::optional<LeakWarning> w = Rising(key, series, fill, step, device);
  const bool said_in_steps = said != said_.end() && said->second.warning.in_steps_over > 0;
  const bool coarse_sampled = history.coarse_sampled(key);
  if (!w && said_in_steps && !coarse_sampled) return std::nullopt;  // not judged now
  std::optional<SiteHistory::Series> coarse;
  if (!w && coarse_sampled) {
    coarse = history.CoarseOf(key);
    w = RisingInSteps(key, *coarse, fill, step, device);
    // A series halved below what a fit needs says nothing yet: judged at a later sample.
    if (!w && said_in_steps && !Judgeable(*coarse)) return std::nullopt;
  }
  if (!w) return Withdraw(key, step, series, coarse);
  if (said == said_.end()) {
    said_[key] = Said{*w, step, step};
    return w;
  }
  if (!Moved(said->second.warning, *w, step) || !DueAgain(said->second, step)) {
    // Not said now but growing in steps: judged at coarse samples from here on.
    if (w->in_steps_over > 0) said->second.warning.in_steps_over = w->in_steps_over;
    return std::nullopt;
  }
  said->second.warning = *w;
  said->second.last_step = step;
  return w;
}

std::vector<LeakWarning> LeakWarner::Check(
    std::uint64_t step, const SiteHistory& history,
    const absl::flat_hash_map<std::int32_t, DeviceFigures>& devices) {
  std::vector<LeakWarning> out;
  if (steps_ == 0) return out;
  for (std::uint64_t key : history.Keys()) {
    if ((key & 0xFFFFFFFFu) == SiteHistory::kPinnedLow) continue;  // totals: not a site
    const auto device = devices.find(static_cast<std::int32_t>(key >> 32));
    if (std::optional<LeakWarning> w =
            Judge(key, step, history, device == devices.end() ? DeviceFigures{} : device->second)) {
      out.push_back(*w);
    }
  }
  // Fastest first; of sites growing alike (two tensors kept by one object), the one
  // holding more, then the older key: the same order in every run.
  std::sort(out.begin(), out.end(), [](const LeakWarning& a, const LeakWarning& b) {
    return std::tie(b.bytes_per_step, b.live, a.key) < std::tie(a.bytes_per_step, a.live, b.key);
  });
  return out;
}

std::string GrowthPhrase(const LeakWarning& w, std::size_t steps, const char* unit) {
  return w.in_steps_over > 0 ? absl::StrCat(" grew in ", unit, "s over the last ", w.in_steps_over,
                                            " ", unit, " ends, +")
                             : absl::StrCat(" grew at each of the last ", steps, " ", unit,
                                            " ends, +");
}

std::string StoppedPhrase(const LeakWarning& w, std::size_t stopped, const char* unit,
                          const char* figure) {
  if (w.fell_back) {
    return absl::StrCat(" fell back to ", report::Bytes(static_cast<double>(w.live)),
                        " from the ", report::Bytes(static_cast<double>(w.live_when_said)),
                        " it held when warned of: memory given back, as a request's or an "
                        "epoch's at its end, is not a leak\n");
  }
  if (w.live < w.live_when_said) {  // it fell back: given back, not filled and stopped
    return absl::StrCat(" holds less than when warned of (", figure, " ",
                        report::Bytes(static_cast<double>(w.live)), " against ",
                        report::Bytes(static_cast<double>(w.live_when_said)),
                        ") and has held no more for the last ", stopped, " ", unit,
                        " ends: memory given back, as outputs gathered until an epoch's end "
                        "and then cleared, is not a leak\n");
  }
  return absl::StrCat(" has held no more for the last ", stopped, " ", unit, " ends (", figure,
                      " ", report::Bytes(static_cast<double>(w.live)),
                      "): memory that fills up and stops, such as a cache, is not a leak\n");
}

}  // namespace gpumem
