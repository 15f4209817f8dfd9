// Live memory by stack at one moment of a trace, and what each stack allocated up to that
// moment: the content of a heap profile (`gpumem export --format pprof`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/report/report.h"

namespace gpumem::report {

// The moment: the peak of allocated memory, the OOM that ended the run (else the first
// OOM), or the end of step N.
struct ProfilePoint {
  enum class Kind { kPeak, kOom, kStep };
  Kind kind = Kind::kPeak;
  std::size_t step = 0;  // kStep: numbered from 1, as the report numbers steps
};

// "peak", "oom" or "step:N" (N >= 1).
absl::StatusOr<ProfilePoint> ParseProfilePoint(absl::string_view text);

struct StackSample {
  std::uint32_t stack = 0;  // index into Trace::stacks (0: no stack recorded)
  int device = 0;
  std::uint64_t inuse_bytes = 0;   // live at the moment
  std::uint64_t inuse_blocks = 0;
  std::uint64_t alloc_bytes = 0;   // allocated from the trace's start to the moment
  std::uint64_t allocs = 0;
};

struct StackProfile {
  std::size_t index = 0;        // the state after events [0, index)
  std::string description;      // the moment, in words, e.g. "the peak (event 812)"
  std::optional<int> device;    // at an OOM: that device's memory only; else every device
  std::int64_t duration_us = 0; // from the trace's first event to the moment
  std::uint64_t inuse_bytes = 0;  // all samples together
  std::vector<StackSample> samples;  // by stack, then device
};

// Errors say why the moment does not exist in this trace: no OOM, fewer step ends.
absl::StatusOr<StackProfile> BuildStackProfile(const Report& report, const ProfilePoint& point);

}  // namespace gpumem::report
