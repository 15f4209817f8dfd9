#include "tools/report/terminal_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/report/json_report.h"
#include "tools/report/oom_explain.h"

namespace gpumem::report {
namespace {

constexpr std::size_t kTopSuspects = 5;
constexpr std::size_t kStackLines = 4;

std::string Paint(bool color, const char* code, absl::string_view text) {
  return color ? absl::StrCat("\033[", code, "m", text, "\033[0m") : std::string(text);
}

}  // namespace

std::string FormatTerminal(const Report& r, bool color) {
  const trace::Trace& t = *r.trace;
  std::string out;
  absl::StrAppend(&out, Paint(color, "1", absl::StrCat("gpumem report: ", t.source)), "  (",
                  t.format, ", ", t.events.size(), " events)\n");
  absl::StrAppend(&out, "  steps: ", r.steps.count, ", ", StepMethodName(r.steps.method));
  if (!r.steps.detail.empty()) absl::StrAppend(&out, " (", r.steps.detail, ")");
  absl::StrAppend(&out, "\n  peak allocated ", Bytes(r.timeline.peak_allocated), " in step ",
                  r.steps.StepOf(r.timeline.peak_allocated_index) + 1);
  if (r.timeline.has_segments) absl::StrAppend(&out, ", peak reserved ", Bytes(r.timeline.peak_reserved));
  if (r.capacity) absl::StrAppend(&out, ", capacity ", Bytes(*r.capacity), " (", r.capacity_source, ")");
  absl::StrAppend(&out, "\n\n");

  const bool bad = !r.ooms.empty() || !r.leaks.suspects.empty();
  absl::StrAppend(&out, Paint(color, bad ? "1;31" : "1;32", absl::StrCat("Verdict: ", Verdict(r))), "\n");

  if (!r.leaks.suspects.empty()) {
    absl::StrAppend(&out, "\nLeak suspects (ranked by bytes leaked per step; fit over ",
                    r.leaks.samples_used, " step ends",
                    r.sites.common_dir().empty() ? "" : absl::StrCat("; sites in ", r.sites.common_dir()),
                    "):\n");
    for (std::size_t i = 0; i < r.leaks.suspects.size() && i < kTopSuspects; ++i) {
      const LeakSuspect& s = r.leaks.suspects[i];
      absl::StrAppend(&out, absl::StrFormat("  %zu. %s\n     +%s/step  R²=%.3f  since step %zu  "
                                            "%llu blocks never freed\n",
                                            i + 1, Paint(color, "1", s.name), Bytes(s.bytes_per_step),
                                            s.r2, s.first_step + 1,
                                            static_cast<unsigned long long>(s.blocks_never_freed)));
      // From the site outwards (the user's code); the library frames inside it in one line.
      const std::vector<std::uint32_t>& frames = t.stacks[s.stack];
      std::size_t at = 0;
      while (at < frames.size() && frames[at] != r.sites.frame(s.site)) ++at;
      if (at == frames.size()) at = 0;
      if (at > 0) absl::StrAppend(&out, "       in  ", FrameName(t.frames[frames[0]]), "\n");
      for (std::size_t f = at; f < frames.size() && f < at + kStackLines; ++f) {
        absl::StrAppend(&out, "       ", f == at ? "at  " : "    ", FrameName(t.frames[frames[f]]), "\n");
      }
      if (frames.size() > at + kStackLines) {
        absl::StrAppend(&out, "       ... ", frames.size() - at - kStackLines, " more frames\n");
      }
    }
    if (r.leaks.suspects.size() > kTopSuspects) {
      absl::StrAppend(&out, "  ... and ", r.leaks.suspects.size() - kTopSuspects, " more (--json lists all)\n");
    }
    if (r.projected_oom_step) {
      absl::StrAppend(&out, "  At this rate the run runs out of ", Bytes(*r.capacity), " in step ",
                      *r.projected_oom_step + 1, ".\n");
    } else if (!r.capacity) {
      absl::StrAppend(&out, "  (give --capacity SIZE to project the step that would run out of memory)\n");
    }
  }
  for (std::size_t i = 0; i < r.ooms.size() && i < 3; ++i) {
    const OomExplanation& x = r.ooms[i];
    absl::StrAppend(&out, "\n", Paint(color, "1;31", absl::StrCat("OOM ", i + 1, " (", OomClassName(x.cls), ")")),
                    " in step ", x.at.step + 1, ", requesting ", Bytes(x.at.request), ":\n  ",
                    x.evidence, "\n  Fix: ", x.fix, "\n");
  }
  if (r.ooms.size() > 3) absl::StrAppend(&out, "  ... and ", r.ooms.size() - 3, " more OOMs (--json lists all)\n");
  for (const std::string& w : r.warnings) absl::StrAppend(&out, "\nwarning: ", w);
  if (!r.warnings.empty()) absl::StrAppend(&out, "\n");
  return out;
}

}  // namespace gpumem::report
