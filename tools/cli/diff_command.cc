// gpumem diff: live bytes by site at two step ends of one trace, or in two runs (before
// and after a code change), with what grew, what is new and what is gone.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/cli/command.h"
#include "tools/cli/loss_warning.h"
#include "tools/report/diff.h"
#include "tools/report/diff_output.h"
#include "tools/trace/load.h"

namespace gpumem::cli {
namespace {

struct DiffArgs {
  std::vector<std::string> traces;
  std::size_t from = 0;
  std::size_t to = 0;
  bool from_given = false;
  bool to_given = false;
  std::size_t top = report::kDiffTopDefault;
  bool json = false;
  std::string html;
  std::string step_site;
};

int BadInput(const std::string& message) { return cli::BadInput("diff", message); }

absl::StatusOr<report::DiffOptions> Options(const DiffArgs& args) {
  report::DiffOptions options;
  if (args.from_given) options.from_step = args.from;
  if (args.to_given) options.to_step = args.to;
  if (!args.step_site.empty()) {
    absl::StatusOr<report::StepSite> site = report::ParseStepSite(args.step_site);
    if (!site.ok()) return site.status();
    options.step_site = *site;
  }
  return options;
}

absl::StatusOr<report::Diff> Compute(const std::vector<trace::Trace>& traces,
                                     const report::DiffOptions& options) {
  if (traces.size() == 1) return report::DiffSteps(traces[0], options);
  return report::DiffRuns(traces[0], traces[1], options);
}

int Print(const report::Diff& diff, const DiffArgs& args) {
  if (!args.html.empty()) {
    std::ofstream out(args.html, std::ios::binary);
    out << report::RenderDiffHtml(diff, args.top);
    out.close();
    if (!out) return BadInput(absl::StrCat(args.html, ": cannot write the HTML page"));
  }
  if (args.json) {
    std::printf("%s\n", report::DiffToJson(diff, args.top).dump(2).c_str());
    if (!args.html.empty()) std::fprintf(stderr, "HTML diff: %s\n", args.html.c_str());
    return kExitOk;
  }
  std::printf("%s", report::FormatDiffTerminal(diff, args.top).c_str());
  if (!args.html.empty()) std::printf("\nHTML diff: %s\n", args.html.c_str());
  return kExitOk;
}

int Run(const DiffArgs& args) {
  absl::StatusOr<report::DiffOptions> options = Options(args);
  if (!options.ok()) return BadInput(std::string(options.status().message()));
  std::vector<trace::Trace> traces;
  for (const std::string& path : args.traces) {
    absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
    if (!t.ok()) return BadInput(std::string(t.status().message()));
    WarnOfLoss(*t);
    traces.push_back(std::move(*t));
  }
  absl::StatusOr<report::Diff> diff = Compute(traces, *options);
  if (!diff.ok()) return BadInput(std::string(diff.status().message()));
  return Print(*diff, args);
}

constexpr const char* kFooter =
    "Examples:\n"
    "  gpumem diff run.gpumem --from 2 --to 10    what grew between the ends of steps 2 and 10\n"
    "  gpumem diff before.gpumem after.gpumem     two runs, each at its last step end\n"
    "\n"
    "Steps are counted as `gpumem report` counts them (step marks, annotations, or inferred;\n"
    "the output says which) and numbered from 1; a point is the state at the end of that step.\n"
    "One trace: --from defaults to 1, --to to the last step end. Two runs: --from is a step\n"
    "of the first, --to of the second, each defaulting to that run's last step end (its end\n"
    "when it has no steps); sites are matched by name (file:line function). Sites are sorted\n"
    "by growth, largest first. Exit status 2 on bad input (unreadable trace, step out of range).";

}  // namespace

void AddDiffCommand(CLI::App& app, int* status) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* cmd = app.add_subcommand(
      "diff",
      "Compare live memory by site between two step ends of one trace, or between two runs "
      "(before and after a change): growth per site, sites that are new or gone.");
  cmd->add_option("traces", args->traces,
                  "one trace (diff two of its steps) or two (diff the runs); gpumem traces, "
                  "PyTorch snapshot pickles or .trace.tsv(.gz)")
      ->required()
      ->expected(1, 2);
  CLI::Option* from = cmd->add_option("--from", args->from, "the step whose end is the starting point (from 1)");
  CLI::Option* to = cmd->add_option("--to", args->to, "the step whose end is compared with it");
  cmd->add_option("--top", args->top, "how many sites to show, by growth (0: all)")
      ->default_val(report::kDiffTopDefault);
  cmd->add_flag("--json", args->json, "print one JSON object instead of the table");
  cmd->add_option("--html", args->html, "also write a self-contained HTML page to FILE");
  cmd->add_option("--step-site", args->step_site,
                  "FILE:LINE whose allocations start each step (when steps are not marked)");
  cmd->footer(kFooter);
  cmd->callback([args, status, from, to] {
    args->from_given = from->count() > 0;
    args->to_given = to->count() > 0;
    *status = Run(*args);
  });
}

}  // namespace gpumem::cli
