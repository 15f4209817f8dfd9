// Live bytes of each site at the last step ends, in bounded memory: the largest kMaxSites
// sites (by live bytes; a site pushed out starts a new series when it comes back) over a
// ring of the last kSteps step ends, and a coarse series over the whole time the site was
// tracked: at most kSteps samples, one every `stride` step ends, every other one dropped
// and the stride doubled when full. Each site has its own stride, from 1 when it is taken
// in, so that a site that appears late in a long run (a leak that begins after thousands
// of healthy steps) is seen as finely as its own age allows. What the early leak warning
// and the verdict at an OOM fit their growth to; the coarse series shows what kSteps step
// ends cannot (a leak that keeps something every tenth step, or one too slow to rise
// above noise in 32 steps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tools/report/verdict_rules.h"

namespace gpumem {

class SiteHistory {
 public:
  static constexpr std::size_t kSteps = 32;
  static constexpr std::size_t kMaxSites = 256;

  // One step end: each site's live bytes (sites not named had none). `pinned` keys, whose
  // low 32 bits are kPinnedLow (the device totals), are never pushed out.
  static constexpr std::uint64_t kPinnedLow = 0xFFFFFFFFu;
  void Add(std::uint64_t step, const absl::flat_hash_map<std::uint64_t, std::uint64_t>& live,
           const std::vector<std::uint64_t>& pinned);

  // A site's samples since it was last taken in, oldest first.
  struct Series {
    std::vector<double> steps;
    std::vector<std::uint64_t> live;
  };
  Series Of(std::uint64_t key) const;
  Series CoarseOf(std::uint64_t key) const;
  // The most the site held at a step end since it was taken in, and the least since then:
  // whether a rise refills what it gave back before (report::FillLevel).
  report::FillLevel FillOf(std::uint64_t key) const;
  std::vector<std::uint64_t> Keys() const;

  // The site's steady growth (report::RecentSteadyGrowth) over its ring or its coarse
  // series: the recent rate, counted from where the series reaching back furthest saw it
  // begin (`live_then`, `step_ends` since).
  struct FoundGrowth {
    report::Growth growth;
    std::uint64_t live_then = 0;
    std::size_t step_ends = 0;
  };
  std::optional<FoundGrowth> GrowthOf(std::uint64_t key, double min_growth) const;
  std::uint64_t last_step() const { return count_ == 0 ? 0 : steps_[head_]; }
  // Whether the last Add took a coarse sample of `key` (every stride-th step end).
  bool coarse_sampled(std::uint64_t key) const;

 private:
  struct Ring {
    std::uint64_t values[kSteps] = {};
    std::size_t samples = 0;  // since it was taken in, at most kSteps
    // The coarse series, oldest first, and the step end of each sample.
    std::uint64_t coarse[kSteps] = {};
    std::uint64_t coarse_steps[kSteps] = {};
    std::size_t coarse_samples = 0;
    std::size_t stride = 1;
    std::size_t since_coarse = 0;  // step ends since the last coarse sample
    bool coarse_sampled = false;   // at the last Add
    report::FillLevel fill;  // over every step end, not only the kSteps kept
  };
  // The site's value at this step end, in its ring and, every stride-th, its coarse series.
  void Push(Ring& ring, std::uint64_t step, std::uint64_t value) const;
  void TakeIn(std::uint64_t step, const absl::flat_hash_map<std::uint64_t, std::uint64_t>& live);
  // Keeps the newest coarse sample and every other one before it; doubles the stride.
  static void HalveCoarse(Ring& ring);

  std::uint64_t steps_[kSteps] = {};
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  absl::flat_hash_map<std::uint64_t, Ring> sites_;
};

}  // namespace gpumem
