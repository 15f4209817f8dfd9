// The parts of the HTML page's data (html_report.h), each capped so that the page's size
// does not grow with the trace: the timeline (html_timeline.cc), and the live set and the
// segment map at a moment (html_live.cc).
#pragma once

#include <cstddef>

#include "nlohmann/json.hpp"
#include "tools/report/detail.h"
#include "tools/report/report.h"

namespace gpumem::report::html {

// Timeline points for the whole page; several ranks share them (at least kMinRankPoints
// each), so a job's page is bounded too.
inline constexpr std::size_t kViewPoints = 16384;
inline constexpr std::size_t kMinRankPoints = 1024;
// A job's page: sections of their own for this many ranks (those that differ first); the
// merged view (table, bars, heat map) has every rank.
inline constexpr std::size_t kRankSections = 8;
// Events kept one point each around the peak and the first OOM (zoom's finest detail).
inline constexpr std::size_t kDetailEvents = 2048;
inline constexpr std::size_t kTopSites = 8;       // drawn as bands; the rest is "other"
inline constexpr std::size_t kStackFrames = 40;    // frames of a band's stack in its tooltip
inline constexpr std::size_t kFlameNodes = 3000;   // per icicle; smaller frames merged
inline constexpr std::size_t kSegments = 300;      // the largest segments
inline constexpr std::size_t kSegmentBlocks = 20000;  // drawn blocks over all segments
inline constexpr std::size_t kListed = 50;         // OOMs, suspects, failures, warnings
inline constexpr std::size_t kStepPeaks = 400;     // per rank, for the ranks' heat map

// The timeline: points (steps, seconds, allocated envelope, reserved, the top sites'
// bytes), the bands' sites and stacks, the detail windows, OOM marks and the projection.
nlohmann::json TimelineJson(const Report& report, const Detail& detail);

// Each step's highest allocated bytes, at most kStepPeaks values (the highest of each run
// of steps): how the ranks of a job compare over the run.
nlohmann::json StepPeaksJson(const Report& report);

// The live set at a moment as an icicle tree, at most kFlameNodes nodes.
nlohmann::json FlameJson(const Report& report, const LiveSnapshot& snapshot);

// The largest kSegments segments with their blocks (neighbours merged past the cap).
nlohmann::json SegmentsJson(const LiveSnapshot& snapshot, bool* truncated);

}  // namespace gpumem::report::html
