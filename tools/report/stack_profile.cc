#include "tools/report/stack_profile.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tools/report/live_state.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {
namespace {

// Where the moment is in the event stream, and what to call it.
struct Moment {
  std::size_t index = 0;  // the state after events [0, index)
  std::string description;
  std::optional<int> device;
};

absl::Status NoSuchMoment(const Report& r, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(r.trace->source, ": ", why));
}

absl::StatusOr<Moment> PeakMoment(const Report& r) {
  if (r.timeline.allocs == 0) return NoSuchMoment(r, "no allocations, so no peak to profile");
  const std::size_t i = r.timeline.peak_allocated_index;
  return Moment{i + 1,
                absl::StrCat("the peak of allocated memory (", r.timeline.peak_allocated,
                             " bytes, event ", i, ")"),
                std::nullopt};
}

absl::StatusOr<Moment> OomMoment(const Report& r) {
  if (r.ooms.empty()) return NoSuchMoment(r, "no OOM in the trace, so nothing for --at oom (try --at peak)");
  const bool fatal = r.fatal_oom.has_value();
  const OomPoint& at = r.ooms[fatal ? *r.fatal_oom : 0].at;
  return Moment{at.index,
                absl::StrCat(fatal ? "the OOM that ended the run" : "the first OOM", " in step ",
                             at.step + 1, " (device ", at.device, ", ", at.request,
                             " bytes requested, event ", at.index, ")"),
                at.device};
}

absl::StatusOr<Moment> StepMoment(const Report& r, std::size_t step) {
  const std::vector<std::size_t>& ends = r.steps.ends;
  if (step == 0 || step > ends.size()) {
    return NoSuchMoment(r, absl::StrCat("--at step:", step, ": the trace has ", ends.size(),
                                        " step ends (steps: ", StepMethodName(r.steps.method), ")"));
  }
  const std::size_t end = ends[step - 1];
  return Moment{end, absl::StrCat("the end of step ", step, " (event ", end, ")"), std::nullopt};
}

absl::StatusOr<Moment> FindMoment(const Report& r, const ProfilePoint& point) {
  switch (point.kind) {
    case ProfilePoint::Kind::kOom:
      return OomMoment(r);
    case ProfilePoint::Kind::kStep:
      return StepMoment(r, point.step);
    case ProfilePoint::Kind::kPeak:
      break;
  }
  return PeakMoment(r);
}

using SampleMap = absl::flat_hash_map<std::pair<std::uint32_t, int>, StackSample>;

StackSample& SampleOf(SampleMap& samples, std::uint32_t stack, int device) {
  StackSample& s = samples[{stack, device}];
  s.stack = stack;
  s.device = device;
  return s;
}

// Replays events [0, m.index): allocations counted by stack as they come, then the
// blocks live at the end.
SampleMap Walk(const Report& r, const Moment& m) {
  const trace::Trace& t = *r.trace;
  auto counted = [&](int device) { return !m.device || *m.device == device; };
  SampleMap samples;
  LiveState state(r.sites);
  for (std::size_t i = 0; i < m.index && i < t.events.size(); ++i) {
    const trace::Event& e = t.events[i];
    if (e.action == trace::Action::kAlloc && counted(e.device)) {
      StackSample& s = SampleOf(samples, e.stack_id, e.device);
      s.alloc_bytes += DeviceBytes(e.size);
      ++s.allocs;
    }
    state.Apply(e);
  }
  for (const auto& [key, block] : state.blocks()) {
    const int device = LiveState::DeviceOfKey(key);
    if (!counted(device)) continue;
    StackSample& s = SampleOf(samples, block.stack, device);
    s.inuse_bytes += block.size;
    ++s.inuse_blocks;
  }
  return samples;
}

std::int64_t DurationUs(const trace::Trace& t, std::size_t index) {
  const std::size_t last = std::min(index, t.events.size());
  return last == 0 ? 0 : t.events[last - 1].time_us - t.events.front().time_us;
}

}  // namespace

absl::StatusOr<ProfilePoint> ParseProfilePoint(absl::string_view text) {
  if (text == "peak") return ProfilePoint{ProfilePoint::Kind::kPeak, 0};
  if (text == "oom") return ProfilePoint{ProfilePoint::Kind::kOom, 0};
  std::size_t step = 0;
  if (absl::ConsumePrefix(&text, "step:") && absl::SimpleAtoi(text, &step) && step >= 1) {
    return ProfilePoint{ProfilePoint::Kind::kStep, step};
  }
  return absl::InvalidArgumentError("--at must be peak, oom or step:N (N >= 1)");
}

absl::StatusOr<StackProfile> BuildStackProfile(const Report& r, const ProfilePoint& point) {
  absl::StatusOr<Moment> m = FindMoment(r, point);
  if (!m.ok()) return m.status();
  StackProfile p;
  p.index = m->index;
  p.description = m->description;
  p.device = m->device;
  p.duration_us = DurationUs(*r.trace, m->index);
  for (auto& [key, sample] : Walk(r, *m)) {
    p.inuse_bytes += sample.inuse_bytes;
    p.samples.push_back(sample);
  }
  std::sort(p.samples.begin(), p.samples.end(), [](const StackSample& a, const StackSample& b) {
    return std::pair(a.stack, a.device) < std::pair(b.stack, b.device);
  });
  return p;
}

}  // namespace gpumem::report
