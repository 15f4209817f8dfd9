// Why each OOM happened: a leak (memory kept from step to step grows), fragmentation (the
// allocator held enough free memory, but no piece big enough), or a genuine peak (the
// program needs more than the device has). Evidence in figures, the fix in plain words.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/report/leaks.h"
#include "tools/report/steps.h"
#include "tools/report/timeline.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {

// What replaying the trace through gpumem's allocator under the same capacity showed.
struct ReplayOutcome {
  bool ran = false;
  std::string error;          // why it could not run
  bool served_past_oom = false;  // it served the request that failed here
  std::uint64_t peak_reserved = 0;
  std::optional<std::size_t> own_oom_index;  // where it ran out itself, if it did
};

// A capacity and where it came from ("--capacity", "trace: ...").
struct KnownCapacity {
  std::uint64_t bytes = 0;
  std::string source;
  bool lower_bound = false;  // the cap is at least `bytes` (what an OOM tells, CapFromOom)
};

struct OomExplanation {
  OomPoint at;
  OomClass cls = OomClass::kPeak;
  bool recovered = false;  // the program caught it and went on (oom_fate.h)
  bool fatal = false;      // the OOM that ended the run
  std::uint64_t capacity = 0;
  std::string capacity_source;  // "--capacity", "trace", "reserved + driver free"
  bool capacity_known = true;   // false: the stand-in, reserved + driver free
  bool capacity_lower_bound = false;  // the cap is at least `capacity`, not known exactly
  std::uint64_t free_cached = 0;  // reserved - allocated
  std::uint64_t leaked_bytes = 0;  // added by the suspects since their first step end used
  double leak_bytes_per_step = 0;
  std::string evidence;
  std::string fix;
  std::optional<ReplayOutcome> replay;
  // Where every step so far was a call of the model awaiting the first backward pass: the
  // calls made by the OOM (it came in the first iteration). 0: not so.
  std::size_t first_iteration_calls = 0;
};
// "in step 12", or "in the first iteration, at call 135 of the model".
std::string OomWhere(const OomExplanation& x);

// How many sites the reports list as what held the device at the OOM that ended the run.
inline constexpr std::size_t kLargestLiveListed = 5;
// The `n` sites that held most on the OOM's device at it, (site, bytes), largest first;
// empty where the timeline did not keep its sites (between the first and latest of many).
std::vector<std::pair<std::uint32_t, std::uint64_t>> LargestLiveAt(const OomPoint& p,
                                                                   std::size_t n);

// `capacities[i]`: the capacity in force at timeline.ooms[i] (--capacity or the trace's),
// where known; else it is what the process held plus what the driver had free.
// `died_of_oom_at`: DiedOfOomAt of the trace.
std::vector<OomExplanation> ExplainOoms(const Timeline& timeline, const LeakAnalysis& leaks,
                                        const Steps& steps,
                                        const std::vector<std::optional<KnownCapacity>>& capacities,
                                        const std::optional<ReplayOutcome>& replay,
                                        std::optional<std::int64_t> died_of_oom_at);

// Replays through gpumem's allocator if any OOM looks like fragmentation (the caller
// decides; this only runs it).
ReplayOutcome ReplayThroughGpumem(const trace::Trace& trace, std::uint64_t capacity,
                                  std::size_t oom_index);

}  // namespace gpumem::report
