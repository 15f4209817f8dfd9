#include "tools/report/oom_explain.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/report/oom_fate.h"
#include "tools/replay/replayer.h"

namespace gpumem::report {
namespace {

constexpr char kLeakFix[] =
    "Find what keeps the suspect's tensors alive from one step to the next: keep numbers, "
    "not tensors (loss.item() instead of appending the loss), detach() what is kept for "
    "logging, del references you no longer need, and run evaluation under "
    "torch.no_grad(). torch.cuda.empty_cache() does not cure a leak: the memory is still "
    "referenced.";
constexpr char kFragmentationFix[] =
    "The memory exists but is cut into pieces: run with gpumem's allocator (it maps "
    "free pages into one range instead of needing a contiguous piece), or set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; allocating the largest, "
    "longest-lived tensors first also helps.";
constexpr char kPeakFix[] =
    "The step genuinely needs more memory than the device has: use a smaller batch "
    "(with gradient accumulation to keep the effective batch), activation checkpointing, "
    "mixed precision (bf16/fp16 autocast), or shard optimizer state and parameters "
    "across devices (FSDP / ZeRO).";

}  // namespace

const char* OomClassName(OomClass c) {
  switch (c) {
    case OomClass::kLeak: return "leak";
    case OomClass::kFragmentation: return "fragmentation";
    case OomClass::kPeak: return "peak";
  }
  return "peak";
}

std::string Bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", v) : absl::StrFormat("%.2f %s", v, units[u]);
}

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

// Growth of the suspects between the first step end the fit used and the OOM.
std::uint64_t LeakedBytes(const OomPoint& p, const Timeline& timeline, const LeakAnalysis& leaks) {
  const std::size_t base_sample = timeline.sample_step.size() > 4 ? 1 : 0;
  std::uint64_t leaked = 0;
  for (const LeakSuspect& s : leaks.suspects) {
    if (p.site_live.size() <= s.site || timeline.site_samples[s.site].size() <= base_sample) continue;
    const std::uint64_t base = timeline.site_samples[s.site][base_sample];
    const std::uint64_t now = p.site_live[s.site];
    if (now > base) leaked += now - base;
  }
  return leaked;
}

void ExplainLeak(const LeakAnalysis& leaks, OomExplanation* x) {
  const OomPoint& p = x->at;
  x->cls = OomClass::kLeak;
  x->evidence = absl::StrCat(
      "live memory at step ends grew by ", Bytes(leaks.bytes_per_step), " per step (",
      leaks.suspects.size(), " suspect site", leaks.suspects.size() == 1 ? "" : "s", ", top: ",
      leaks.suspects.front().name, "); at the OOM in step ", p.step + 1, ", ",
      Bytes(x->leaked_bytes), " of the ", Bytes(p.allocated),
      " allocated was that growth. Without it the request of ", Bytes(p.request),
      " would have fit in ", Bytes(x->capacity), ".");
  x->fix = kLeakFix;
}

void ExplainFragmentation(const std::optional<ReplayOutcome>& replay, OomExplanation* x) {
  const OomPoint& p = x->at;
  x->cls = OomClass::kFragmentation;
  x->evidence = absl::StrCat(
      "the allocator held ", Bytes(x->free_cached), " free in its segments (reserved ",
      Bytes(p.reserved), ", allocated ", Bytes(p.allocated), "), more than the request of ",
      Bytes(p.request), ", but the largest free piece was ", Bytes(p.largest_free_piece),
      "; the driver had ", Bytes(p.device_free), " free.");
  x->fix = kFragmentationFix;
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

void ExplainPeak(const LeakAnalysis& leaks, OomExplanation* x) {
  const OomPoint& p = x->at;
  x->cls = OomClass::kPeak;
  const std::string growth =
      p.step < kMinStepsForLeak
          ? absl::StrCat("only ", p.step, " step", p.step == 1 ? "" : "s",
                         " had finished, too few to call growth a leak")
          : absl::StrCat("live memory at step ends did not grow",
                         leaks.suspects.empty() ? "" : " enough to explain it");
  x->evidence = absl::StrCat(
      "allocated ", Bytes(p.allocated), " plus the request of ", Bytes(p.request), " is ",
      Bytes(p.allocated + p.request), " against a capacity of ", Bytes(x->capacity),
      "; free cached memory (", Bytes(x->free_cached), ") could not cover it, and ", growth, ".");
  x->fix = kPeakFix;
}

}  // namespace

std::vector<OomExplanation> ExplainOoms(const Timeline& timeline, const LeakAnalysis& leaks,
                                        const Steps& steps,
                                        const std::vector<std::optional<KnownCapacity>>& capacities,
                                        const std::optional<ReplayOutcome>& replay) {
  std::vector<OomExplanation> out;
  const std::optional<std::size_t> fatal = FatalOom(timeline.ooms, steps);
  for (std::size_t i = 0; i < timeline.ooms.size(); ++i) {
    const OomPoint& p = timeline.ooms[i];
    OomExplanation x;
    x.at = p;
    x.recovered = OomRecovered(p, steps);
    x.fatal = fatal == i;
    if (i < capacities.size() && capacities[i]) {
      x.capacity = capacities[i]->bytes;
      x.capacity_source = capacities[i]->source;
    } else {
      // What the process could have held: what it held plus what the driver had free.
      x.capacity = p.reserved + p.device_free;
      x.capacity_source = "reserved + driver free at the OOM";
    }
    x.free_cached = p.reserved > p.allocated ? p.reserved - p.allocated : 0;
    x.leaked_bytes = LeakedBytes(p, timeline, leaks);
    x.leak_bytes_per_step = leaks.bytes_per_step;
    const std::uint64_t need = p.allocated + p.request;
    const bool leak = p.step >= kMinStepsForLeak && !leaks.suspects.empty() &&
                      x.leaked_bytes > 0 && need - std::min(need, x.leaked_bytes) <= x.capacity;
    const bool fragmented = x.free_cached >= p.request && p.largest_free_piece < p.request;
    if (leak) {
      ExplainLeak(leaks, &x);
    } else if (fragmented) {
      ExplainFragmentation(replay, &x);
    } else {
      ExplainPeak(leaks, &x);
    }
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace gpumem::report
