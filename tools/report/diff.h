// Live bytes by site at two points, and what changed between them: two step ends of one
// trace, or one point in each of two runs (before and after a code change), sites matched
// by name. The points are step ends as the report counts them (tools/report/steps.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/report/steps.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

// One side of a diff: where in which trace, and what was live there.
struct DiffPoint {
  std::string trace;          // the file it came from
  std::optional<std::size_t> step;  // 1-based step whose end it is; nullopt: the trace's end
  std::size_t event_index = 0;      // the state after events [0, event_index)
  Steps steps;                      // how the trace's steps were found
  std::string sites_relative_to;    // the folder site names are shown relative to, or ""
  std::uint64_t live_bytes = 0;     // allocated bytes there, all devices
};

enum class SiteChange { kGrown, kShrunk, kUnchanged, kNew, kGone };
const char* SiteChangeName(SiteChange change);  // "grown", "shrunk", "unchanged", "new", "gone"

struct SiteDiff {
  std::string site;  // "file:line function", as the report names sites
  std::uint64_t from_bytes = 0;
  std::uint64_t to_bytes = 0;
  std::int64_t delta() const {
    return static_cast<std::int64_t>(to_bytes) - static_cast<std::int64_t>(from_bytes);
  }
  SiteChange change() const;
};

struct Diff {
  bool two_runs = false;
  DiffPoint from;
  DiffPoint to;
  // Every site live at either point, largest growth first (ties by name).
  std::vector<SiteDiff> sites;
  std::size_t Count(SiteChange change) const;
  // Sites live at both points (for two runs: matched by name across the runs).
  std::size_t matched() const;
};

struct DiffOptions {
  std::optional<std::size_t> from_step;  // 1-based; see DiffSteps / DiffRuns for defaults
  std::optional<std::size_t> to_step;
  std::optional<StepSite> step_site;     // as `gpumem report --step-site`
};

// Two step ends of one trace. Defaults: from the first step end to the last. An error
// (naming the trace and the valid range) when a step has no end in the trace.
absl::StatusOr<Diff> DiffSteps(const trace::Trace& trace, const DiffOptions& options);

// `from_step` in run `a`, `to_step` in run `b`. Default: each run's last step end, or its
// end where it has no steps.
absl::StatusOr<Diff> DiffRuns(const trace::Trace& a, const trace::Trace& b, const DiffOptions& options);

}  // namespace gpumem::report
