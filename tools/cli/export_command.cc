// gpumem export: a trace in another tool's format: Perfetto / Chrome JSON (memory
// counters, steps and OOMs on a timeline), a PyTorch memory snapshot pickle (opens in
// PyTorch's memory_viz) or a pprof heap profile at one moment (go tool pprof, speedscope,
// Pyroscope).
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/cli/command.h"
#include "tools/cli/damage_warning.h"
#include "tools/cli/loss_warning.h"
#include "tools/cli/write_file.h"
#include "tools/cli/export_pprof.h"
#include "tools/report/perfetto_export.h"
#include "tools/report/steps.h"
#include "tools/trace/load.h"
#include "tools/trace/snapshot_writer.h"

namespace gpumem::cli {
namespace {

struct ExportArgs {
  std::string trace;
  std::string format;
  std::string output;
  std::string at;  // pprof only: peak (default), oom, step:N
};

int BadInput(const std::string& message) { return cli::BadInput("export", message); }

// The moment a pprof profile is taken at; checked before the trace is read.
absl::StatusOr<report::ProfilePoint> PprofPoint(const ExportArgs& args) {
  if (args.format != "pprof") {
    if (!args.at.empty()) return absl::InvalidArgumentError("--at applies to --format pprof only");
    return report::ProfilePoint{};
  }
  if (absl::Status available = PprofAvailable(); !available.ok()) return available;
  return report::ParseProfilePoint(args.at.empty() ? "peak" : args.at);
}

int Run(const ExportArgs& args) {
  absl::StatusOr<report::ProfilePoint> at = PprofPoint(args);
  if (!at.ok()) return BadInput(std::string(at.status().message()));
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(args.trace);
  if (!t.ok()) return BadInput(std::string(t.status().message()));
  WarnOfLoss(*t);
  WarnOfDamage(*t);
  std::string data;
  if (args.format == "pprof") {
    std::string moment;
    absl::StatusOr<std::string> profile = PprofExport(*t, *at, &moment);
    if (!profile.ok()) return BadInput(std::string(profile.status().message()));
    std::fprintf(stderr, "profiled %s\n", moment.c_str());
    data = std::move(*profile);
  } else if (args.format == "perfetto") {
    report::Steps steps = report::FindSteps(*t, std::nullopt);
    data = report::ExportPerfetto(*t, steps).dump();
  } else {
    absl::StatusOr<std::string> pickle = trace::WriteSnapshotPickle(*t);
    if (!pickle.ok()) return BadInput(absl::StrCat(args.trace, ": ", pickle.status().message()));
    data = std::move(*pickle);
  }
  if (absl::Status written = WriteFile(args.output, data); !written.ok()) {
    return BadInput(std::string(written.message()));
  }
  std::fprintf(stderr, "wrote %s (%zu bytes)\n", args.output.c_str(), data.size());
  return kExitOk;
}

}  // namespace

void AddExportCommand(CLI::App& app, int* status) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a trace for another viewer: perfetto (Chrome/Perfetto JSON: allocated and "
      "reserved per device, steps and OOMs), pytorch-snapshot (a pickle for PyTorch's "
      "memory_viz) or pprof (a gzipped profile.proto: live memory by stack at one moment and "
      "what each stack allocated up to it, for go tool pprof, speedscope, Pyroscope).");
  cmd->add_option("trace", args->trace, "a gpumem trace, PyTorch snapshot or .trace.tsv(.gz)")->required();
  cmd->add_option("--format", args->format, "perfetto | pytorch-snapshot | pprof")
      ->required()
      ->check(CLI::IsMember({"perfetto", "pytorch-snapshot", "pprof"}));
  cmd->add_option("-o,--output", args->output, "the file to write")->required();
  cmd->add_option("--at", args->at,
                  "pprof: the moment whose live memory is profiled: peak (default), oom (the OOM "
                  "that ended the run, else the first), step:N (the end of step N, from 1)");
  cmd->callback([args, status] { *status = Run(*args); });
}

}  // namespace gpumem::cli
