// gpumem export: a trace in another tool's format: Perfetto / Chrome JSON (memory
// counters, steps and OOMs on a timeline) or a PyTorch memory snapshot pickle (opens in
// PyTorch's memory_viz).
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/cli/command.h"
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
};

int BadInput(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "gpumem export: %s\n", line.c_str());
  return kExitBadInput;
}

int Run(const ExportArgs& args) {
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(args.trace);
  if (!t.ok()) return BadInput(std::string(t.status().message()));
  std::string data;
  if (args.format == "perfetto") {
    report::Steps steps = report::FindSteps(*t, std::nullopt);
    data = report::ExportPerfetto(*t, steps).dump();
  } else {
    absl::StatusOr<std::string> pickle = trace::WriteSnapshotPickle(*t);
    if (!pickle.ok()) return BadInput(absl::StrCat(args.trace, ": ", pickle.status().message()));
    data = std::move(*pickle);
  }
  std::ofstream out(args.output, std::ios::binary);
  out << data;
  out.close();
  if (!out) return BadInput(absl::StrCat(args.output, ": cannot write"));
  std::fprintf(stderr, "wrote %s (%zu bytes)\n", args.output.c_str(), data.size());
  return kExitOk;
}

}  // namespace

void AddExportCommand(CLI::App& app, int* status) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a trace for another viewer: perfetto (Chrome/Perfetto JSON: allocated and "
      "reserved per device, steps and OOMs) or pytorch-snapshot (a pickle for PyTorch's "
      "memory_viz).");
  cmd->add_option("trace", args->trace, "a gpumem trace, PyTorch snapshot or .trace.tsv(.gz)")->required();
  cmd->add_option("--format", args->format, "perfetto | pytorch-snapshot")
      ->required()
      ->check(CLI::IsMember({"perfetto", "pytorch-snapshot"}));
  cmd->add_option("-o,--output", args->output, "the file to write")->required();
  cmd->callback([args, status] { *status = Run(*args); });
}

}  // namespace gpumem::cli
