#include "tools/report/oom_explain.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/report/oom_fate.h"
#include "tools/replay/replayer.h"

namespace gpumem::report {
ReplayOutcome ReplayThroughGpumem(const trace::Trace& trace, std::uint64_t capacity,
                                  std::size_t oom_index) {
  ReplayOutcome out;
  replay::ReplayOptions options;
  options.capacity = capacity;
  absl::StatusOr<replay::ReplayResult> result = replay::Replay(trace, "gpumem", options);
  if (!result.ok()) {
    out.error = std::string(result.status().message());
    return out;
  }
  out.ran = true;
  out.peak_reserved = result->peak_reserved;
  if (result->oom) out.own_oom_index = result->oom->event_index;
  out.served_past_oom = !result->oom || result->oom->event_index > oom_index;
  return out;
}

namespace {

// The suspects' growth on the OOM's device, between the first step end the fit used and
// the OOM. A site spread over devices (a model's replicas) grew on each in the share of
// its live bytes it holds there: a site on another device freed nothing here.
struct DeviceGrowth {
  std::uint64_t bytes = 0;
  const LeakSuspect* top = nullptr;  // the first suspect (fastest growing) that grew here
};

// What `site` held at the OOM, and the share of it on the OOM's device: the OOM's own
// record, or for one whose record the timeline gave up (between the first and the latest
// of many), what the site kept through the step before it, on the device holding most.
std::pair<std::uint64_t, long double> LiveAtOom(const OomPoint& p, const Timeline& timeline,
                                                std::size_t site) {
  if (p.site_live.empty()) {
    if (p.step == 0) return {0, 0.0L};
    // The last sample at a step end before the OOM's step.
    const std::size_t j = static_cast<std::size_t>(
        absl::c_upper_bound(timeline.sample_step, p.step - 1) - timeline.sample_step.begin());
    const bool here = timeline.site_device.empty() ||  // one device
                      (site < timeline.site_device.size() && timeline.site_device[site] == p.device);
    return {j == 0 ? 0 : timeline.site_samples[site][j - 1], here ? 1.0L : 0.0L};
  }
  if (p.site_live.size() <= site || p.site_live_on_device.size() <= site) return {0, 0.0L};
  const std::uint64_t now = p.site_live[site];
  return {now, now == 0 ? 0.0L : static_cast<long double>(p.site_live_on_device[site]) / now};
}

DeviceGrowth GrowthOnDevice(const OomPoint& p, const Timeline& timeline,
                            const LeakAnalysis& leaks) {
  const std::size_t base_sample = timeline.sample_step.size() > 4 ? 1 : 0;
  DeviceGrowth out;
  for (const LeakSuspect& s : leaks.suspects) {
    if (timeline.site_samples[s.site].size() <= base_sample) continue;
    const std::uint64_t base = timeline.site_samples[s.site][base_sample];
    const auto [now, share] = LiveAtOom(p, timeline, s.site);
    if (now <= base) continue;
    const auto grown = static_cast<std::uint64_t>(static_cast<long double>(now - base) * share);
    out.bytes += grown;
    if (out.top == nullptr && grown > 0) out.top = &s;
  }
  return out;
}

// The failed request was made by the library that keeps a growing suspect's memory.
bool RequestFromGrower(const OomPoint& p, const LeakAnalysis& leaks) {
  return absl::c_any_of(leaks.suspects, [&](const LeakSuspect& s) {
    return RequestedByGrower(p.request_keeper, s.keeper);
  });
}

void ExplainLeak(const DeviceGrowth& growth, const LeakAnalysis& leaks, const OomFigures& figures,
                 OomExplanation* x) {
  const OomPoint& p = x->at;
  x->cls = OomClass::kLeak;
  const LeakSuspect& top = growth.top != nullptr ? *growth.top : leaks.suspects.front();
  // A graph pool's free memory counts with its site: more than was allocated can grow.
  const bool pools = top.holds_graph_pools;
  x->evidence = absl::StrCat(
      "memory kept from step to step grew by ", Bytes(leaks.bytes_per_step), " per step (",
      leaks.suspects.size(), " suspect site", leaks.suspects.size() == 1 ? "" : "s", ", top: ",
      SuspectText(top), "); at the OOM in step ", p.step + 1, ", ",
      Bytes(x->leaked_bytes), GrowthHeldIn(pools, p.allocated),
      " was that growth, and ", LeakRequestText(figures, KeeperName(p.request_keeper)),
      LeakCutShortText(figures, leaks.bytes_per_step, "step", "steps"), ".");
  x->fix =
      FixWithKeeper(OomClass::kLeak, top.keeper, Keeper::kNone, OomFix(OomClass::kLeak, pools));
}

// A leak told by a helper thread's kept blocks, before steps could show growth.
void ExplainHelperLeak(OomExplanation* x) {
  const OomPoint& p = x->at;
  x->cls = OomClass::kLeak;
  x->leaked_bytes = p.helper_kept.bytes;
  x->evidence = absl::StrCat(
      HelperKeptText(p.helper_kept, p.helper_site), "; at the OOM in step ", p.step + 1, ", ",
      p.step,
      " step", p.step == 1 ? "" : "s",
      " had finished, too few to measure growth. Without those blocks the request of ",
      Bytes(p.request), " would have fit in ", Bytes(x->capacity), ".");
  x->fix = kHelperKeptFix;
}

void ExplainFragmentation(const std::optional<ReplayOutcome>& replay, OomExplanation* x) {
  const OomPoint& p = x->at;
  x->cls = OomClass::kFragmentation;
  x->evidence = absl::StrCat(
      "the allocator held ", Bytes(x->free_cached), " free in its segments (reserved ",
      Bytes(p.reserved), ", allocated ", Bytes(p.allocated), "), more than the request of ",
      Bytes(p.request), ", but the largest free piece was ", Bytes(p.largest_free_piece),
      "; the driver had ", Bytes(p.device_free), " free.");
  x->fix = OomFix(OomClass::kFragmentation);
  if (!replay) return;
  x->replay = replay;
  if (!replay->ran) {
    absl::StrAppend(&x->fix, " (A replay through gpumem could not run: ", replay->error, ".)");
  } else if (replay->served_past_oom) {
    absl::StrAppend(&x->fix, " A replay of this trace through gpumem's allocator with ",
                    Bytes(x->capacity), " served this request (its peak reserved: ",
                    Bytes(replay->peak_reserved), ").");
  } else {
    absl::StrAppend(&x->fix, " A replay through gpumem's allocator with ", Bytes(x->capacity),
                    " ran out of memory too, so reduce the peak as well.");
  }
}

// Where the cap is known only as a lower bound (a snapshot does not record it) and the
// run grew: the cap under which that growth, not the peak, is what ran out.
std::string LeakUnderALargerCap(const LeakAnalysis& leaks, const OomExplanation& x) {
  const OomPoint& p = x.at;
  if (!x.capacity_lower_bound || leaks.suspects.empty() || x.leaked_bytes == 0 ||
      p.step < kMinStepsForLeak) {
    return "";
  }
  const std::uint64_t need = p.allocated + p.request;
  const std::uint64_t without = need - std::min(need, x.leaked_bytes);
  // The site that kept the most, whatever its rate: a late burst grows faster per step.
  const LeakSuspect& most = *absl::c_max_element(
      leaks.suspects,
      [](const LeakSuspect& a, const LeakSuspect& b) { return a.growth_bytes < b.growth_bytes; });
  return absl::StrCat(" The trace does not record the cap, only that it was at least ",
                      Bytes(x.capacity), ": under a cap of ", Bytes(without),
                      " or more, the ", Bytes(x.leaked_bytes),
                      " kept from step to step (most at ", SuspectText(most),
                      ") is what ran out, a leak; give --capacity to decide.");
}

void ExplainPeak(const LeakAnalysis& leaks, OomExplanation* x) {
  const OomPoint& p = x->at;
  const std::size_t first_iteration_calls = x->first_iteration_calls;
  x->cls = OomClass::kPeak;
  const std::string growth =
      first_iteration_calls > 0 ? FirstIterationGrowth(first_iteration_calls)
      : p.step < kMinStepsForLeak
          ? absl::StrCat("only ", p.step, " step", p.step == 1 ? "" : "s",
                         " had finished, too few to call growth a leak")
          : absl::StrCat("memory kept from step to step did not grow",
                         leaks.suspects.empty() ? "" : " enough to explain it");
  x->evidence = absl::StrCat(
      "allocated ", Bytes(p.allocated), " plus the request of ", Bytes(p.request), " is ",
      Bytes(p.allocated + p.request), " against a capacity of ", Bytes(x->capacity),
      "; free cached memory (", Bytes(x->free_cached), ") could not cover it, and ", growth, ".");
  absl::StrAppend(&x->evidence, LeakUnderALargerCap(leaks, *x));
  x->fix = FixWithKeeper(OomClass::kPeak, Keeper::kNone, p.request_keeper, OomFix(OomClass::kPeak));
  if (first_iteration_calls > 0) absl::StrAppend(&x->fix, " ", kFirstIterationFix, ".");
}

void ExplainHeldApart(OomExplanation* x) {
  const OomPoint& p = x->at;
  x->cls = OomClass::kHeldApart;
  x->evidence = absl::StrCat(
      "the allocator held ", Bytes(x->free_cached), " free in its segments (reserved ",
      Bytes(p.reserved), ", allocated ", Bytes(p.allocated), "), with pieces as large as ",
      Bytes(p.largest_free_piece), " for a request of ", Bytes(p.request), ", under a capacity of ",
      Bytes(x->capacity), ", yet the request was refused: that memory was not its to use.");
  x->fix = OomFix(OomClass::kHeldApart);
}

}  // namespace

std::string OomWhere(const OomExplanation& x) {
  if (x.first_iteration_calls > 0) {
    return absl::StrCat("in the first iteration, at call ", x.first_iteration_calls,
                        " of the model");
  }
  return absl::StrCat("in step ", x.at.step + 1);
}

std::vector<std::pair<std::uint32_t, std::uint64_t>> LargestLiveAt(const OomPoint& p,
                                                                   std::size_t n) {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
  for (std::size_t s = 0; s < p.site_live_on_device.size(); ++s) {
    if (p.site_live_on_device[s] > 0) {
      out.emplace_back(static_cast<std::uint32_t>(s), p.site_live_on_device[s]);
    }
  }
  const auto larger = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  const std::size_t kept = std::min(n, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(kept), out.end(), larger);
  out.resize(kept);
  return out;
}

std::vector<OomExplanation> ExplainOoms(const Timeline& timeline, const LeakAnalysis& leaks,
                                        const Steps& steps,
                                        const std::vector<std::optional<KnownCapacity>>& capacities,
                                        const std::optional<ReplayOutcome>& replay,
                                        std::optional<std::int64_t> died_of_oom_at) {
  std::vector<OomExplanation> out;
  const std::optional<std::size_t> fatal = FatalOom(timeline.ooms, steps, died_of_oom_at);
  for (std::size_t i = 0; i < timeline.ooms.size(); ++i) {
    const OomPoint& p = timeline.ooms[i];
    OomExplanation x;
    x.at = p;
    x.fatal = fatal == i;
    x.recovered = !x.fatal && OomRecovered(p, steps);
    if (i < capacities.size() && capacities[i]) {
      x.capacity = capacities[i]->bytes;
      x.capacity_source = capacities[i]->source;
      x.capacity_lower_bound = capacities[i]->lower_bound;
    } else {
      // What the process could have held: what it held plus what the driver had free.
      x.capacity = p.reserved + p.device_free;
      x.capacity_source = "reserved + driver free at the OOM";
      x.capacity_known = false;
    }
    x.free_cached = p.reserved > p.allocated ? p.reserved - p.allocated : 0;
    const DeviceGrowth growth = GrowthOnDevice(p, timeline, leaks);
    x.leaked_bytes = growth.bytes;
    x.leak_bytes_per_step = leaks.bytes_per_step;
    // An OOM while every mark so far was a call awaiting the first backward pass, memory
    // growing over them (not a batch-size finder's attempts, each freed when it failed),
    // came in the first iteration: none had finished.
    const bool first_iteration = p.step > 0 && p.step <= steps.first_iteration_marks &&
                                 !leaks.suspects.empty();
    OomFigures figures;
    figures.finished_steps = first_iteration ? 0 : p.step;
    figures.allocated = p.allocated;
    figures.request = p.request;
    figures.capacity = x.capacity;
    figures.capacity_known = x.capacity_known;
    figures.free_cached = x.free_cached;
    figures.largest_free = p.largest_free_piece;
    figures.growth_suspected = !leaks.suspects.empty();
    figures.grown_bytes = x.leaked_bytes;
    figures.first_iteration_calls = first_iteration ? p.step + 1 : 0;
    if (!p.helper_site.empty()) figures.helper_kept_bytes = p.helper_kept.bytes;
    figures.request_from_grower = RequestFromGrower(p, leaks);
    const OomClass cls = ClassifyOom(figures);
    if (cls == OomClass::kLeak && HelperKeptExplains(figures)) {
      ExplainHelperLeak(&x);
    } else if (cls == OomClass::kLeak) {
      ExplainLeak(growth, leaks, figures, &x);
    } else if (cls == OomClass::kFragmentation) {
      ExplainFragmentation(replay, &x);
    } else if (cls == OomClass::kHeldApart) {
      ExplainHeldApart(&x);
    } else {
      x.first_iteration_calls = figures.first_iteration_calls;
      ExplainPeak(leaks, &x);
    }
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace gpumem::report
