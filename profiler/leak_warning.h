// The early leak warning: at a step end, a site whose live bytes rose at each of the last
// `steps` step ends, by a growth worth calling a leak (report::MinLeakGrowth), gets one
// stderr line with its rate and the step at which the device's cap would be reached. A
// site that grows in steps too far apart for that (something kept once an epoch) is
// warned of from its coarse series (SiteHistory), by the rule the report calls a leak
// with (report::RecentSteadyGrowth), once that series reaches back past the last kSteps
// step ends; such a warning is judged again at each coarse sample only.
// It is said again only when that projection moves by more than a quarter of the steps
// it had left (or, with no cap known, when the rate moves by more than a quarter), and
// no sooner than as many step ends after it was last said as that was after it was
// first said (at least `steps`): a rate that wobbles (batches of varying length) says a
// few lines a run, not one every few steps. A site
// warned of that then holds no more for stopped_steps() step ends than at their start
// (a cache that filled up, a buffer as long as the longest batch) has its warning
// withdrawn, once (one warned of in steps: once its coarse series too has held no more
// for kCoarseStoppedSamples samples and three times its longest pause between rises,
// since such growth is flat between its steps);
// should it grow again it is warned of again, from growth since the withdrawal alone (a
// cache that fills ever more slowly is not warned of anew for what it grew before). A rise that only refills
// what the site held before and gave back (report::FillLevel: a validation pass that
// gathers its outputs each epoch, then reduces them) is not warned of.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "profiler/site_history.h"

namespace gpumem {

struct LeakWarning {
  std::uint64_t key = 0;          // LiveBlocks::Key(device, site)
  double bytes_per_step = 0;
  std::uint64_t live = 0;
  std::uint64_t grown_from = 0;  // what the site held where the growth warned of began
  std::optional<std::uint64_t> oom_step;  // projected, from the cap in force
  bool withdrawn = false;  // the site stopped growing: the earlier warning no longer holds
  // Withdrawn as a better source began marking steps, the site holding less than the
  // `live_when_said` it was warned at: it grew within one iteration.
  bool given_back = false;
  std::uint64_t live_when_said = 0;  // set on every withdrawal
  // Withdrawn as its site held no more over LeakWarner::kTrialMarks step ends once a
  // better source began marking steps: it grew within one iteration.
  bool flat_since_switch = false;
  // Withdrawn as its site gave back most of the growth it was warned of (LeakWarner::
  // GaveBackItsGrowth): a leak never does.
  bool fell_back = false;
  std::uint64_t in_steps_over = 0;  // step ends its coarse series grew over (0: each step)
};

// The words the warning lines share, `unit` being "step" or "pass". How the site grew:
// " grew at each of the last 5 step ends, +" (the rate follows).
std::string GrowthPhrase(const LeakWarning& w, std::size_t steps, const char* unit);
// Why a warning is withdrawn: " has held no more for the last 5 step ends (live 2.00 GiB):
// memory that fills up and stops, ...", `figure` naming the bytes ("live", "held"); where
// the site holds less than when warned of, that it gave the memory back.
std::string StoppedPhrase(const LeakWarning& w, std::size_t stopped, const char* unit,
                          const char* figure);

class LeakWarner {
 public:
  // 0 turns the warning off; more than SiteHistory::kSteps - 1 is that many.
  explicit LeakWarner(std::size_t steps);

  // `cap` and `peak` of a device: its cap (0: unknown) and the most live in the last step.
  struct DeviceFigures {
    std::uint64_t cap = 0;
    std::uint64_t step_peak = 0;
  };
  std::vector<LeakWarning> Check(std::uint64_t step, const SiteHistory& history,
                                 const absl::flat_hash_map<std::int32_t, DeviceFigures>& devices);
  // Called at each step end once a better source began marking steps (an optimizer step,
  // where model calls or backward passes stood in before it; `switched`: this is its first
  // mark): the step ends the warnings were said at may have been parts of one iteration.
  // At the switch every warning goes on trial: until the new source's step ends have
  // shown kTrialMarks intervals, one whose site holds less than when it was said is
  // withdrawn (given_back), one whose site grows past what it held at the new source's
  // second mark stands, and one held flat throughout is withdrawn (flat_since_switch).
  std::vector<LeakWarning> WithdrawSinceBetterSource(std::uint64_t step,
                                                     const SiteHistory& history,
                                                     bool switched);
  static constexpr std::size_t kTrialMarks = 2;
  // Step ends without growth after which a warning is withdrawn.
  std::size_t stopped_steps() const { return stopped_steps_; }

 private:
  // Not said of a rise that refills what the site gave back before (`fill`).
  std::optional<LeakWarning> Rising(std::uint64_t key, const SiteHistory::Series& s,
                                    const report::FillLevel& fill, std::uint64_t step,
                                    const DeviceFigures& device) const;
  // Whether a coarse series has the samples and the span to be fitted.
  static bool Judgeable(const SiteHistory::Series& coarse);
  // Samples without a rise in a coarse series from sample `from`: the longest run between
  // two rises, and the run since the last.
  struct Pauses {
    std::size_t longest = 0;
    std::size_t trailing = 0;
  };
  static Pauses PausesOf(const SiteHistory::Series& coarse, std::size_t from);
  // Whether growth in a coarse series from sample `from` has held no more, at its end, for
  // longer than the longest pause between its rises (and a sample more, for where the
  // samples fall): a cache that grew at every sample and filled, not a leak that keeps
  // something once an epoch and is flat between.
  static bool PausedPastItsRhythm(const SiteHistory::Series& coarse, std::size_t from);
  // The growth of a coarse series, fitted as the report fits it.
  // Growth that began before the site's warning was withdrawn does not count.
  std::optional<LeakWarning> RisingInSteps(std::uint64_t key, const SiteHistory::Series& s,
                                           const report::FillLevel& fill, std::uint64_t step,
                                           const DeviceFigures& device) const;
  // What to say of `key` at this step end: a warning, a withdrawal, or nothing.
  std::optional<LeakWarning> Judge(std::uint64_t key, std::uint64_t step,
                                   const SiteHistory& history, const DeviceFigures& device);
  // A warning said, and the steps at which it was first and last said.
  struct Said {
    LeakWarning warning;
    std::uint64_t first_step = 0;
    std::uint64_t last_step = 0;
    std::size_t trial_marks_left = 0;  // > 0: on trial since a better source's first mark
    // What the site held at the better source's second mark: unset before it.
    std::optional<std::uint64_t> trial_baseline = std::nullopt;
  };
  // A leak never gives back what it kept: a warned site whose bytes fell by
  // kGivenBackShare of the growth it was warned of (a request's prefix, freed at its end)
  // is withdrawn at once, however its coarse series runs.
  static constexpr double kGivenBackShare = 0.75;
  static bool GaveBackItsGrowth(const LeakWarning& w, const SiteHistory::Series& s);
  LeakWarning WithdrawNow(absl::flat_hash_map<std::uint64_t, Said>::iterator said,
                          std::uint64_t step, std::uint64_t live, bool fell_back);
  bool Moved(const LeakWarning& before, const LeakWarning& now, std::uint64_t step) const;
  bool DueAgain(const Said& said, std::uint64_t step) const;
  // Whether the last `samples` of `s` hold no more than the one before them.
  static bool Stopped(const SiteHistory::Series& s, std::size_t samples);
  // Coarse samples without growth after which a warning said in steps is withdrawn.
  static constexpr std::size_t kCoarseStoppedSamples = 4;
  // The withdrawal of the warning said of `key`, if it was warned of and has stopped.
  // `coarse`: the site's coarse series, where this step end sampled it.
  std::optional<LeakWarning> Withdraw(std::uint64_t key, std::uint64_t step,
                                      const SiteHistory::Series& s,
                                      const std::optional<SiteHistory::Series>& coarse);

  std::size_t steps_;
  std::size_t stopped_steps_;
  absl::flat_hash_map<std::uint64_t, Said> said_;
  // The step end at which each site's last warning was withdrawn.
  absl::flat_hash_map<std::uint64_t, std::uint64_t> withdrawn_at_;
};

}  // namespace gpumem
