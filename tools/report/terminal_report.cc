#include "tools/report/terminal_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/report/json_report.h"
#include "tools/report/oom_explain.h"
#include "tools/report/outside_format.h"

namespace gpumem::report {
namespace {

constexpr std::size_t kTopSuspects = 5;
constexpr std::size_t kStackLines = 4;

std::string Paint(bool color, const char* code, absl::string_view text) {
  return color ? absl::StrCat("\033[", code, "m", text, "\033[0m") : std::string(text);
}

// Idle cache after a recovered OOM worth a word: libraries that allocate outside the
// allocator (cuBLAS, cuDNN, NCCL) then find the device full.
constexpr double kIdleShareWorthNoting = 0.25;
constexpr std::size_t kRecoveredListed = 5;

// The OOM's evidence and fix, then what held its device: the sites to look at first
// whatever the class (a leak's suspects are listed apart, with their growth).
void AppendFatalOom(const Report& r, const OomExplanation& x, bool color, std::string* out) {
  absl::StrAppend(out, "\n", Paint(color, "1;31", absl::StrCat("OOM that ended the run (", OomClassName(x.cls), ")")),
                  " ", OomWhere(x), ", requesting ", Bytes(x.at.request), ":\n  ",
                  x.evidence, "\n  Fix: ", x.fix, "\n");
  const auto largest = LargestLiveAt(x.at, kLargestLiveListed);
  if (largest.empty()) return;
  absl::StrAppend(out, "  Live on device ", x.at.device, " at it, by site (", Bytes(x.at.allocated),
                  " allocated):\n");
  for (const auto& [site, bytes] : largest) {
    absl::StrAppend(out, absl::StrFormat("    %-12s %s\n", Bytes(bytes), r.sites.name(site)));
  }
}

// One line per OOM the run went on from (or that came just before the fatal one), and
// what the last of them left in the cache; the fix only once.
void AppendOtherOoms(const Report& r, std::string* out) {
  std::size_t listed = 0, others = 0;
  const OomExplanation* last_recovered = nullptr;
  for (const OomExplanation& x : r.ooms) {
    if (x.fatal) continue;
    ++others;
    if (x.recovered) last_recovered = &x;
    if (listed == kRecoveredListed) continue;
    if (listed++ == 0) absl::StrAppend(out, "\nOOMs the program caught and went on from:\n");
    absl::StrAppend(out, "  step ", x.at.step + 1, ": ", Bytes(x.at.request), " requested with ",
                    Bytes(x.at.allocated), " allocated (", OomClassName(x.cls), ")",
                    x.recovered ? "" : ", not recovered", "\n");
  }
  if (others > listed) absl::StrAppend(out, "  ... and ", others - listed, " more (--json lists all)\n");
  if (last_recovered == nullptr) return;
  const OomPoint& p = last_recovered->at;
  const std::uint64_t idle = p.reserved_after > p.allocated_after ? p.reserved_after - p.allocated_after : 0;
  absl::StrAppend(out, "  Left behind: ", p.after_is_step_end ? "at the next step end" : "at the trace's end",
                  ", reserved ", Bytes(p.reserved_after), ", allocated ", Bytes(p.allocated_after),
                  " (", Bytes(idle), " idle in the cache).\n");
  if (p.reserved_after > 0 && idle >= kIdleShareWorthNoting * static_cast<double>(p.reserved_after)) {
    absl::StrAppend(out, "  The cache keeps that memory from the driver, so libraries that allocate "
                         "outside the allocator (cuBLAS, cuDNN, NCCL) can fail later: call "
                         "torch.cuda.empty_cache() after catching an OOM.\n");
  }
}

constexpr std::size_t kFailedOutsideListed = 5;

// The failure that ended the run with its evidence and fix; the others one line each.
void AppendFailedOutside(const Report& r, bool color, std::string* out) {
  if (r.fatal_failed_outside) {
    const FailedOutside& f = r.failed_outside[*r.fatal_failed_outside];
    absl::StrAppend(out, "\n", Paint(color, "1;31", "Out of memory outside the allocator, which ended the run"),
                    ":\n  ", FailedOutsideEvidence(f), "\n  Fix: ",
                    FailedOutsideFixFor(r.outside_holder), "\n");
  }
  const std::size_t others = r.failed_outside.size() - (r.fatal_failed_outside ? 1 : 0);
  if (others == 0) return;
  absl::StrAppend(out, "\nFailed allocations outside the allocator (other libraries):\n");
  for (std::size_t i = 0; i < others && i < kFailedOutsideListed; ++i) {
    absl::StrAppend(out, "  ", DescribeFailedOutside(r.failed_outside[i]), "\n");
  }
  if (others > kFailedOutsideListed) {
    absl::StrAppend(out, "  ... and ", others - kFailedOutsideListed, " more (--json lists all)\n");
  }
}

void AppendOoms(const Report& r, bool color, std::string* out) {
  AppendFailedOutside(r, color, out);
  if (r.fatal_oom) AppendFatalOom(r, r.ooms[*r.fatal_oom], color, out);
  AppendOtherOoms(r, out);
  if (!r.ooms.empty() && !r.fatal_oom && !r.fatal_failed_outside) {
    absl::StrAppend(out, "\nThe run did not die of an OOM it saw: every OOM above was caught and "
                         "the program went on.\n");
  }
}

// A process that drove several devices: the header's figures are theirs together; each
// device's, whose memory is its own, follow.
void AppendDevicePeaks(const Report& r, std::string* out) {
  if (r.timeline.DevicesUsed() < 2) return;
  for (std::size_t d = 0; d < r.timeline.devices.size(); ++d) {
    const Timeline::DevicePeaks& p = r.timeline.devices[d];
    if (p.allocated == 0) continue;
    absl::StrAppend(out, "\n    device ", d, ": peak allocated ", Bytes(p.allocated));
    if (r.timeline.has_segments) absl::StrAppend(out, ", peak reserved ", Bytes(p.reserved));
  }
}

void AppendHeader(const Report& r, bool color, std::string* out) {
  const trace::Trace& t = *r.trace;
  absl::StrAppend(out, Paint(color, "1", absl::StrCat("gpumem report: ", t.source)), "  (",
                  t.format, ", ", t.events.size(), " events)\n");
  absl::StrAppend(out, "  steps: ", r.steps.count, ", ", StepMethodName(r.steps.method));
  if (!r.steps.detail.empty()) absl::StrAppend(out, " (", r.steps.detail, ")");
  absl::StrAppend(out, "\n  peak allocated ", Bytes(r.timeline.peak_allocated), " in step ",
                  r.steps.StepOf(r.timeline.peak_allocated_index) + 1);
  if (r.timeline.has_segments) absl::StrAppend(out, ", peak reserved ", Bytes(r.timeline.peak_reserved));
  if (r.timeline.DevicesUsed() > 1) absl::StrAppend(out, " (", r.timeline.DevicesUsed(), " devices together)");
  if (r.capacity) absl::StrAppend(out, ", capacity ", Bytes(*r.capacity), " (", r.capacity_source, ")");
  AppendDevicePeaks(r, out);
  absl::StrAppend(out, "\n\n");
}

// From the site outwards (the user's code); the library frames inside it in one line.
void AppendSuspectStack(const Report& r, const LeakSuspect& s, std::string* out) {
  const trace::Trace& t = *r.trace;
  const std::vector<std::uint32_t>& frames = t.stacks[s.stack];
  std::size_t at = 0;
  while (at < frames.size() && frames[at] != r.sites.frame(s.site)) ++at;
  if (at == frames.size()) at = 0;
  if (at > 0) absl::StrAppend(out, "       in  ", FrameName(t.frames[frames[0]]), "\n");
  for (std::size_t f = at; f < frames.size() && f < at + kStackLines; ++f) {
    absl::StrAppend(out, "       ", f == at ? "at  " : "    ", FrameName(t.frames[frames[f]]), "\n");
  }
  if (frames.size() > at + kStackLines) {
    absl::StrAppend(out, "       ... ", frames.size() - at - kStackLines, " more frames\n");
  }
}

// A leak outside the allocator, after the allocator's own suspects: a library of this
// process kept driver memory (the CUPTI trace's), with no stack in this trace.
void AppendOutsideSuspect(const Report& r, bool color, std::string* out) {
  const UnusualHolder& h = r.outside_holder;
  if (!h.growth) return;
  absl::StrAppend(out, absl::StrFormat("  outside the allocator: %s\n     +%s/step  R²=%.3f  "
                                       "over %zu step ends; %s held at the end, taken from "
                                       "the driver and kept\n",
                                       Paint(color, "1", HolderName(h)),
                                       Bytes(h.growth->bytes_per_step),
                                       h.growth->r2, h.samples - h.growth->from,
                                       Bytes(static_cast<double>(h.bytes))));
  if (r.outside_projected_oom_step) {
    absl::StrAppend(out, "     At this rate the device has no free memory left in step ",
                    *r.outside_projected_oom_step + 1, ".\n");
  }
}

void AppendLeakSuspects(const Report& r, bool color, std::string* out) {
  if (r.leaks.suspects.empty()) {
    if (!r.outside_holder.growth) return;
    absl::StrAppend(out, "\nLeak suspects:\n");
    AppendOutsideSuspect(r, color, out);
    return;
  }
  absl::StrAppend(out, "\nLeak suspects (ranked by bytes leaked per step; fit over ",
                  r.leaks.samples_used, " step ends",
                  r.sites.common_dir().empty() ? "" : absl::StrCat("; sites in ", r.sites.common_dir()),
                  "):\n");
  for (std::size_t i = 0; i < r.leaks.suspects.size() && i < kTopSuspects; ++i) {
    const LeakSuspect& s = r.leaks.suspects[i];
    absl::StrAppend(out, absl::StrFormat("  %zu. %s\n     +%s/step  R²=%.3f  since step %zu  "
                                         "%llu blocks never freed\n",
                                         i + 1, Paint(color, "1", SuspectText(s)), Bytes(s.bytes_per_step),
                                         s.r2, s.first_step + 1,
                                         static_cast<unsigned long long>(s.blocks_never_freed)));
    if (s.holds_graph_pools) {
      absl::StrAppend(out, "     with the memory of the CUDA graph pools captured here, free or not: "
                           "a graph kept alive keeps its pool\n");
    }
    AppendSuspectStack(r, s, out);
  }
  if (r.leaks.suspects.size() > kTopSuspects) {
    absl::StrAppend(out, "  ... and ", r.leaks.suspects.size() - kTopSuspects, " more (--json lists all)\n");
  }
  AppendOutsideSuspect(r, color, out);
  if (r.projected_oom_step) {
    const std::int32_t device = LeakDevice(r.timeline, r.leaks);
    absl::StrAppend(out, "  At this rate the run runs out of ", Bytes(*r.capacity),
                    device < 0 ? "" : absl::StrCat(" on device ", device), " in step ",
                    *r.projected_oom_step + 1, ".\n");
  } else if (!r.capacity) {
    absl::StrAppend(out, "  (give --capacity SIZE to project the step that would run out of memory)\n");
  }
}

}  // namespace

std::string FormatTerminal(const Report& r, bool color) {
  std::string out;
  AppendHeader(r, color, &out);
  const bool bad = !r.ooms.empty() || !r.leaks.suspects.empty() || !r.failed_outside.empty() ||
                   r.outside_holder.growth.has_value();
  absl::StrAppend(&out, Paint(color, bad ? "1;31" : "1;32", absl::StrCat("Verdict: ", Verdict(r))), "\n");
  if (r.cache_pressure) {
    absl::StrAppend(&out, "\nCache pressure: ", CachePressureText(*r.cache_pressure), "\n");
  }
  AppendLeakSuspects(r, color, &out);
  AppendOoms(r, color, &out);
  absl::StrAppend(&out, "\n", FormatOutside(r.outside));
  for (const std::string& w : r.warnings) absl::StrAppend(&out, "\nwarning: ", w);
  if (!r.warnings.empty()) absl::StrAppend(&out, "\n");
  return out;
}

}  // namespace gpumem::report
