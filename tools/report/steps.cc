#include "tools/report/steps.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "profiler/package_notes.h"
#include "profiler/trace_format.h"
#include "tools/report/sites.h"
#include "tools/report/step_unit.h"
#include "tools/trace/backward_caller.h"

namespace gpumem::report {
namespace {

using trace::Action;

// What marked the steps, in the order the sources rank (trace::StepSource); with the
// count of each where more than one did.
std::string StepSourceText(const std::array<std::size_t, trace::kStepSources>& marks) {
  static_assert(format::kStepSourceNames.size() == trace::kStepSources);
  const auto& kNames = format::kStepSourceNames;
  std::vector<std::size_t> used;
  for (std::size_t s = 1; s < marks.size(); ++s) {
    if (marks[s] > 0) used.push_back(s);
  }
  if (used.empty()) return "unrecorded";
  if (used.size() == 1) return std::string(kNames[used[0]]);
  std::string text;
  for (std::size_t s : used) {
    const char* sep = text.empty() ? "" : s == used.back() ? " and " : ", ";
    absl::StrAppend(&text, sep, kNames[s], " (", marks[s], ")");
  }
  return text;
}

Steps FromStepEvents(const trace::Trace& trace) {
  Steps steps;
  std::array<std::size_t, trace::kStepSources> marks{};  // by trace::StepSource
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const trace::Event& e = trace.events[i];
    if (e.action != Action::kStep) continue;
    const bool awaiting = e.step_source == trace::StepSource::kModelCallAwaitingBackward;
    if (awaiting && steps.first_iteration_marks == steps.ends.size()) ++steps.first_iteration_marks;
    steps.ends.push_back(i);
    ++marks[static_cast<std::size_t>(e.step_source)];
  }
  if (steps.ends.empty()) return steps;
  steps.method = StepMethod::kStepEvents;
  steps.count = steps.ends.size();
  steps.source = StepSourceText(marks);
  if (steps.source != "unrecorded") steps.detail = absl::StrCat("marked by ", steps.source);
  return steps;
}

std::int64_t FirstRecordedTime(const trace::Trace& trace) {
  return trace.events.empty() ? std::numeric_limits<std::int64_t>::min()
                              : trace.events.front().time_us;
}

// Optimizer.step ends a step; with GradScaler some steps skip it, so zero_grad counts too:
// whichever of the two ends more often marks the steps. PyTorch keeps every annotation
// but only the last events of a long run (its recorder's ring): steps that ended before
// the first event recorded are not this trace's, and are only counted in the detail.
Steps FromAnnotations(const trace::Trace& trace) {
  Steps steps;
  std::vector<std::int64_t> best_times;
  for (absl::string_view prefix : {"Optimizer.step", "Optimizer.zero_grad"}) {
    std::vector<std::int64_t> times;
    for (const trace::Annotation& a : trace.annotations) {
      if (!a.start && absl::StartsWith(a.name, prefix)) times.push_back(a.time_us);
    }
    if (times.size() > best_times.size()) {
      best_times = std::move(times);
      steps.detail = std::string(prefix);
    }
  }
  if (best_times.empty()) return steps;
  std::sort(best_times.begin(), best_times.end());
  const std::int64_t recording_began = FirstRecordedTime(trace);
  std::size_t before_recording = 0;
  // Events are in time order; an end at time t closes the step at the first later event.
  std::size_t i = 0;
  for (std::int64_t t : best_times) {
    if (t < recording_began) {
      ++before_recording;
      continue;
    }
    while (i < trace.events.size() && trace.events[i].time_us <= t) ++i;
    steps.ends.push_back(i);
  }
  if (steps.ends.empty()) return Steps{};
  steps.method = StepMethod::kAnnotations;
  steps.count = steps.ends.size();
  if (before_recording > 0) {
    absl::StrAppend(&steps.detail, "; ", before_recording,
                    " more ended before the recording began, steps here count from there");
  }
  return steps;
}

bool SaysStepsComing(const trace::Trace& trace) {
  return absl::c_any_of(trace.annotations, [](const trace::Annotation& a) {
    return a.name == format::kStepsComingNote;
  });
}

// Steps that start at the given alloc positions (event indices, ascending).
Steps FromStarts(const std::vector<std::size_t>& starts, StepMethod method, std::string detail) {
  Steps steps;
  steps.method = method;
  steps.count = starts.size();
  steps.detail = std::move(detail);
  // Step k ends where step k+1 starts; the last step's end is not marked.
  for (std::size_t k = 1; k < starts.size(); ++k) steps.ends.push_back(starts[k]);
  return steps;
}

// Allocations autograd's thread made, given the stack of the line that started their
// backward pass (trace/backward_caller.h), were not made at that line.
bool StackHasLine(const trace::Trace& trace, std::uint32_t stack, const StepSite& site) {
  for (std::uint32_t f : trace.stacks[stack]) {
    const trace::Frame& frame = trace.frames[f];
    if (frame.filename == trace::kBackwardPassFile) return false;
    if (frame.line == site.line && absl::EndsWith(frame.filename, site.file)) return true;
  }
  return false;
}

Steps FromStepSite(const trace::Trace& trace, const StepSite& site) {
  std::vector<char> matches(trace.stacks.size(), 0);
  for (std::uint32_t s = 0; s < trace.stacks.size(); ++s) matches[s] = StackHasLine(trace, s, site);
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const trace::Event& e = trace.events[i];
    if (e.action == Action::kAlloc && matches[e.stack_id]) starts.push_back(i);
  }
  return FromStarts(starts, StepMethod::kStepSite, absl::StrCat(site.file, ":", site.line));
}

// An unmarked rest shorter than this many repeats is the last step's own stretch.
constexpr std::size_t kMinTailRepeats = 8;

// A training loop allocates the same sequence of stacks every iteration. Look for an
// "anchor" stack that occurs once per iteration: the stretches between its occurrences
// cover most of the trace, are of similar length, and allocate from the same stacks
// (sizes may differ, e.g. variable-length batches). The longest such period wins.
class PeriodFinder {
 public:
  // Looks at the events from `begin` on.
  PeriodFinder(const trace::Trace& trace, absl::string_view site_dir, std::size_t begin = 0)
      : trace_(trace), site_dir_(site_dir), unit_(trace) {
    for (std::size_t i = begin; i < trace.events.size(); ++i) {
      if (trace.events[i].action == Action::kAlloc) alloc_events_.push_back(i);
    }
  }

  Steps Find() const {
    const std::size_t n = alloc_events_.size();
    if (n < 6) return Steps{};
    // Occurrence positions (in alloc order) of each non-empty stack.
    absl::flat_hash_map<std::uint32_t, std::vector<std::uint32_t>> positions;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t stack = trace_.events[alloc_events_[i]].stack_id;
      if (stack != 0) positions[stack].push_back(static_cast<std::uint32_t>(i));
    }
    // Candidates by count ascending (longest period first), earliest first use on ties.
    std::vector<std::pair<std::size_t, std::uint32_t>> candidates;  // (count, first pos)
    absl::flat_hash_map<std::uint32_t, std::uint32_t> stack_at_first;
    for (const auto& [stack, pos] : positions) {
      if (pos.size() >= 3 && pos.size() <= n / 2) candidates.emplace_back(pos.size(), pos[0]);
      stack_at_first[pos[0]] = stack;
    }
    std::sort(candidates.begin(), candidates.end());
    for (const auto& [count, first] : candidates) {
      const std::uint32_t stack = stack_at_first.at(first);
      const std::vector<std::uint32_t>& pos = positions.at(stack);
      if (!IsPeriodic(pos)) continue;
      std::vector<std::size_t> starts;
      for (std::uint32_t p : pos) starts.push_back(alloc_events_[p]);
      // A repeat that holds no backward is a layer of one forward, not a step.
      if (!unit_.LooksLikeSteps(starts)) continue;
      return FromStarts(starts, StepMethod::kInferred,
                        absl::StrCat("no step marks in the trace; each step starts at an "
                                     "allocation from ", Describe(stack)));
    }
    return Steps{};
  }

 private:
  static constexpr std::size_t kPairsChecked = 64;

  bool IsPeriodic(const std::vector<std::uint32_t>& pos) const {
    const std::size_t n = alloc_events_.size();
    if (n - pos.front() < n / 2) return false;  // the pattern must cover most of the trace
    std::vector<std::size_t> lengths;
    for (std::size_t k = 0; k + 1 < pos.size(); ++k) lengths.push_back(pos[k + 1] - pos[k]);
    std::vector<std::size_t> sorted = lengths;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const std::size_t median = sorted[sorted.size() / 2];
    if (median < 2) return false;
    std::size_t similar_length = 0;
    for (std::size_t len : lengths) similar_length += (len * 2 >= median && len <= median * 2);
    if (similar_length * 10 < lengths.size() * 8) return false;
    // Consecutive stretches allocate from the same stacks (order and sizes may vary,
    // e.g. with variable-length batches). Checked on at most kPairsChecked pairs.
    const std::size_t pairs = lengths.size() - 1;
    if (pairs < 1) return false;
    const std::size_t stride = std::max<std::size_t>(1, pairs / kPairsChecked);
    std::size_t checked = 0, alike = 0;
    for (std::size_t k = 0; k < pairs; k += stride) {
      ++checked;
      alike += Overlap(pos[k], pos[k + 1], pos[k + 1], pos[k + 2]) >= 0.9;
    }
    return alike * 10 >= checked * 8;
  }

  // The share of two stretches' allocations that come from the same stacks.
  double Overlap(std::size_t a_begin, std::size_t a_end, std::size_t b_begin, std::size_t b_end) const {
    absl::flat_hash_map<std::uint32_t, std::int64_t> balance;
    for (std::size_t i = a_begin; i < a_end; ++i) ++balance[StackAt(i)];
    for (std::size_t i = b_begin; i < b_end; ++i) --balance[StackAt(i)];
    std::uint64_t differ = 0;
    for (const auto& [stack, d] : balance) differ += static_cast<std::uint64_t>(d < 0 ? -d : d);
    const double total = static_cast<double>((a_end - a_begin) + (b_end - b_begin));
    return 1.0 - static_cast<double>(differ) / total;
  }

  // The stack's innermost frame in the user's code, named as its site is.
  std::string Describe(std::uint32_t stack) const {
    for (std::uint32_t f : trace_.stacks[stack]) {
      const trace::Frame& frame = trace_.frames[f];
      if (IsLibraryFrame(frame)) continue;
      return absl::StrCat(DisplayPath(frame.filename, site_dir_), ":", frame.line, " ",
                          frame.function);
    }
    return "?";
  }

  std::uint32_t StackAt(std::size_t alloc) const { return trace_.events[alloc_events_[alloc]].stack_id; }

  const trace::Trace& trace_;
  const absl::string_view site_dir_;
  const StepUnitCheck unit_;
  std::vector<std::size_t> alloc_events_;
};

// Whether the events from `begin` on free at least all they allocate: a last pass that
// gathered its outputs and reduced them before the run ended, keeping nothing.
bool GivesBackWhatItTook(const trace::Trace& trace, std::size_t begin) {
  const BytesMoved moved = BytesMovedIn(trace, begin, trace.events.size());
  return moved.freed >= moved.allocated;
}

// Optimizer steps that stopped while the run went on (training, then generation, serving
// or a validation pass that gathers its outputs until it dies): where the unmarked rest
// repeats a pattern that looks like whole passes, as a trace without marks is read, each
// repeat is a step after the last marked one, so that what the rest keeps is seen to grow.
Steps WithUnmarkedTail(const trace::Trace& trace, Steps marked, absl::string_view site_dir) {
  const std::size_t tail_begins = marked.ends.empty() ? 0 : marked.ends.back();
  if (GivesBackWhatItTook(trace, tail_begins)) return marked;
  const Steps tail = PeriodFinder(trace, site_dir, tail_begins).Find();
  if (tail.count < kMinTailRepeats) return marked;
  marked.ends.insert(marked.ends.end(), tail.ends.begin(), tail.ends.end());
  absl::StrAppend(&marked.detail, "; after step ", marked.count, " none is marked: ",
                  absl::StripPrefix(tail.detail, "no step marks in the trace; "));
  marked.count += tail.count;
  return marked;
}

}  // namespace

const char* StepMethodName(StepMethod method) {
  switch (method) {
    case StepMethod::kNone: return "none";
    case StepMethod::kStepEvents: return "step-events";
    case StepMethod::kAnnotations: return "annotations";
    case StepMethod::kStepSite: return "step-site";
    case StepMethod::kInferred: return "inferred";
  }
  return "none";
}

std::size_t Steps::StepOf(std::size_t index) const {
  return static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), index) - ends.begin());
}

absl::StatusOr<StepSite> ParseStepSite(const std::string& text) {
  std::size_t colon = text.rfind(':');
  StepSite site;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(text).substr(colon + 1), &site.line) || site.line <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--step-site '", text, "': expected FILE:LINE"));
  }
  site.file = text.substr(0, colon);
  return site;
}

Steps FindSteps(const trace::Trace& trace, const std::optional<StepSite>& step_site,
                absl::string_view site_dir) {
  if (step_site) return FromStepSite(trace, *step_site);
  if (Steps s = FromStepEvents(trace); s.method != StepMethod::kNone) return s;
  if (Steps s = FromAnnotations(trace); s.method != StepMethod::kNone) {
    return WithUnmarkedTail(trace, std::move(s), site_dir);
  }
  // The package was to mark the steps and none ended: what repeats is a deep model's
  // layers, not passes.
  if (SaysStepsComing(trace)) return Steps{};
  return PeriodFinder(trace, site_dir).Find();
}

}  // namespace gpumem::report
