// gpumem report: leak, fragmentation and OOM diagnosis of one or more traces, as a
// terminal summary, JSON, or a self-contained HTML page.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tools/cli/command.h"
#include "tools/cli/damage_warning.h"
#include "tools/cli/loss_warning.h"
#include "tools/cli/report_ranks.h"
#include "tools/cli/write_file.h"
#include "tools/report/cupti_companion.h"
#include "tools/report/html_report.h"
#include "tools/report/json_report.h"
#include "tools/report/merge.h"
#include "tools/report/report.h"
#include "tools/report/terminal_report.h"
#include "tools/replay/size_parser.h"
#include "tools/trace/load.h"

namespace gpumem::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> traces;
  std::string html;
  bool json = false;
  std::string capacity;
  std::string step_site;
  bool open = false;
};

int BadInput(const std::string& message) { return cli::BadInput("report", message); }

// file:// URL of `path`, which terminals make clickable; bytes outside [A-Za-z0-9/._~-]
// are percent-encoded.
std::string FileUrl(const std::string& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  std::string url = "file://";
  for (unsigned char c : (error ? path : absolute.lexically_normal().string())) {
    if (std::isalnum(c) || std::strchr("/._~-", c) != nullptr) {
      url += static_cast<char>(c);
    } else {
      absl::StrAppend(&url, absl::StrFormat("%%%02X", c));
    }
  }
  return url;
}

// Opens `url` with xdg-open (or $BROWSER); false where neither could run.
bool OpenUrl(const std::string& url) {
  for (const char* opener : {static_cast<const char*>(std::getenv("BROWSER")), "xdg-open"}) {
    if (opener == nullptr || *opener == '\0') continue;
    char* argv[] = {const_cast<char*>(opener), const_cast<char*>(url.c_str()), nullptr};
    pid_t pid = 0;
    int status = 0;
    if (posix_spawnp(&pid, opener, nullptr, nullptr, argv, environ) == 0 &&
        waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      return true;
    }
  }
  return false;
}

// A one-line bar on stderr, redrawn in place; only for a terminal and a long job.
report::Progress MakeProgress(const std::string& name, bool long_job) {
  if (!isatty(STDERR_FILENO) || !long_job) return nullptr;
  return [name](double fraction) {
    const int width = 30;
    const int filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\r%s [%s%s] %3d%%", name.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), static_cast<int>(fraction * 100));
    if (fraction >= 1.0) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  };
}

// --capacity and --step-site, parsed into the options.
absl::StatusOr<report::ReportOptions> ParseOptions(const ReportArgs& args) {
  report::ReportOptions options;
  if (!args.capacity.empty()) {
    absl::StatusOr<std::uint64_t> size = replay::ParseSize(args.capacity);
    if (!size.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--capacity: ", size.status().message()));
    }
    if (*size == 0) {
      return absl::InvalidArgumentError("--capacity: 0 bytes: a device has some memory");
    }
    options.capacity = *size;
  }
  if (!args.step_site.empty()) {
    absl::StatusOr<report::StepSite> site = report::ParseStepSite(args.step_site);
    if (!site.ok()) return site.status();
    options.step_site = *site;
  }
  return options;
}

// Every trace read before any report is made: one bad file fails the whole command before
// any output. A long read shows its progress.
absl::StatusOr<std::vector<trace::Trace>> LoadAll(const std::vector<std::string>& paths) {
  std::vector<trace::Trace> traces;
  for (const std::string& path : paths) {
    std::error_code size_error;
    const std::uintmax_t bytes = std::filesystem::file_size(path, size_error);
    const bool long_read = !size_error && bytes >= (std::uintmax_t{64} << 20);
    absl::StatusOr<trace::Trace> t =
        trace::LoadTrace(path, MakeProgress(path + " (reading)", long_read));
    if (!t.ok()) return t.status();
    WarnOfLoss(*t);
    WarnOfDamage(*t);
    traces.push_back(std::move(*t));
  }
  return traces;
}

void PrintJson(const std::vector<report::Report>& reports, const std::string& url) {
  nlohmann::json j;
  if (reports.size() == 1) {
    j = report::ReportToJson(reports.front());
  } else {
    j["traces"] = nlohmann::json::array();
    for (const report::Report& r : reports) j["traces"].push_back(report::ReportToJson(r));
    j["merged"] = report::MergedToJson(report::MergeRanks(reports));
  }
  std::printf("%s\n", j.dump(2).c_str());
  // stdout holds only the JSON.
  if (!url.empty()) std::fprintf(stderr, "HTML report: %s\n", url.c_str());
}

void PrintTerminal(const std::vector<report::Report>& reports, const std::string& url) {
  const bool color = isatty(STDOUT_FILENO);
  for (std::size_t i = 0; i < reports.size(); ++i) {
    std::printf("%s%s", i ? "\n" : "", report::FormatTerminal(reports[i], color).c_str());
  }
  if (reports.size() > 1) {
    std::printf("\n%s", report::FormatMerged(report::MergeRanks(reports)).c_str());
  }
  if (!url.empty()) std::printf("\nHTML report: %s\n", url.c_str());
}

int Run(const ReportArgs& args) {
  absl::StatusOr<report::ReportOptions> options = ParseOptions(args);
  if (!options.ok()) return BadInput(std::string(options.status().message()));
  // A CUPTI trace, or a ring's segment, named with its trace is read with it
  // (report/cupti_companion.h).
  const std::vector<std::string> paths = report::MainTraces(args.traces);
  // Ranks of a job: read one by one, bounded memory (the HTML page needs them all).
  if (paths.size() > 1 && args.html.empty()) {
    return ReportRanks(paths, *options, args.json);
  }
  absl::StatusOr<std::vector<trace::Trace>> traces = LoadAll(paths);
  if (!traces.ok()) return BadInput(std::string(traces.status().message()));
  std::vector<report::Report> reports;
  reports.reserve(traces->size());
  for (std::size_t i = 0; i < traces->size(); ++i) {
    const trace::Trace& t = (*traces)[i];
    const std::optional<trace::Trace> cupti = report::LoadCuptiCompanion(paths[i]);
    options->progress = MakeProgress(t.source, t.events.size() >= 2'000'000);
    options->cupti = cupti ? &*cupti : nullptr;
    reports.push_back(report::BuildReport(t, *options));
  }
  if (!args.html.empty()) {
    if (absl::Status written = WriteFile(args.html, report::RenderHtml(reports)); !written.ok()) {
      return BadInput(absl::StrCat(written.message(), " (the HTML report)"));
    }
  }
  const std::string url = args.html.empty() ? "" : FileUrl(args.html);
  if (args.json) {
    PrintJson(reports, url);
  } else {
    PrintTerminal(reports, url);
  }
  if (args.open && !OpenUrl(url)) {
    std::fprintf(stderr, "gpumem report: no xdg-open or $BROWSER here; open %s\n", url.c_str());
  }
  return kExitOk;
}

}  // namespace

void AddReportCommand(CLI::App& app, int* status) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Diagnose traces: leak suspects by site (growth per step), the step a leak would run "
      "out of memory, and why each OOM happened (leak, fragmentation or genuine peak).");
  cmd->add_option("traces", args->traces,
                  "gpumem traces, PyTorch snapshot pickles or .trace.tsv(.gz) files; several "
                  "(one per rank of a job) also get a merged view")
      ->required();
  CLI::Option* html =
      cmd->add_option("--html", args->html, "also write a self-contained HTML viewer to FILE");
  cmd->add_flag("--open", args->open, "open the HTML report in a browser (xdg-open, $BROWSER)")
      ->needs(html);
  cmd->add_flag("--json", args->json, "print one JSON object instead of the summary");
  cmd->add_option("--capacity", args->capacity,
                  "device memory to project against, e.g. 80GiB (default: the trace's)");
  cmd->add_option("--step-site", args->step_site,
                  "FILE:LINE whose allocations start each step (when steps are not marked)");
  cmd->callback([args, status] { *status = Run(*args); });
}

}  // namespace gpumem::cli
