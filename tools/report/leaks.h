// Leak suspects: sites whose live bytes at step ends grow step over step. A healthy
// training loop returns to the same live set at every step end, so steady growth there
// is memory the program keeps by mistake.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/report/library_keepers.h"
#include "tools/report/sites.h"
#include "tools/report/steps.h"
#include "tools/report/timeline.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {

struct LeakSuspect {
  std::uint32_t site = 0;
  std::string name;           // "file:line function"
  double bytes_per_step = 0;  // the fit's slope
  double r2 = 0;
  double rising_share = 0;    // share of step-to-step changes that are increases
  std::size_t first_step = 0;  // 0-based: the step of the site's first allocation
  std::uint64_t growth_bytes = 0;  // live at the last sample - live at the first used
  std::uint64_t blocks_never_freed = 0;
  std::uint64_t bytes_never_freed = 0;
  std::uint64_t live_at_last_sample = 0;
  std::uint32_t stack = 0;    // a full stack that allocated there
  std::string kept_through;   // the call its kept blocks came through (SiteTotals)
  bool holds_graph_pools = false;  // what it keeps includes CUDA graph pools' memory
  Keeper keeper = Keeper::kNone;   // the library whose code allocated what it keeps
};

struct LeakAnalysis {
  std::vector<LeakSuspect> suspects;  // ranked by bytes_per_step, largest first
  std::size_t samples_used = 0;       // step ends the fits used
  double bytes_per_step = 0;          // all suspects together
  std::string why_none;               // when no analysis was possible
};

// The library keeping each suspect's memory (Keeper), from its kept stack's frames.
void NameKeepers(const trace::Trace& trace, LeakAnalysis* leaks);

// A suspect as the verdicts name it: its site, and the call its kept blocks came through
// where that tells them from the site's other blocks.
std::string SuspectText(const LeakSuspect& suspect);

// Over the first `sample_count` step ends (all by default): a run that went on after the
// OOM that ended it (another thread draining what the leak kept, before the error reached
// it) is judged up to that OOM.
LeakAnalysis FindLeaks(const Timeline& timeline, const SiteTable& sites, const Steps& steps,
                       std::size_t sample_count = SIZE_MAX);

// The device the suspects grow on, for a process that drives several: the fastest
// suspect's (Timeline::site_device); -1 (every device's memory together) where one
// device allocated or nothing grows.
std::int32_t LeakDevice(const Timeline& timeline, const LeakAnalysis& leaks);
// The growth per step of the suspects on that device.
double LeakRateOnItsDevice(const Timeline& timeline, const LeakAnalysis& leaks);

// The step (0-based) at which allocated memory on the suspects' device (LeakDevice) would
// first exceed `capacity` if they keep growing at their rate; nullopt without suspects or
// when it never would.
std::optional<std::size_t> ProjectOomStep(const Timeline& timeline, const LeakAnalysis& leaks,
                                          std::uint64_t capacity);

}  // namespace gpumem::report
