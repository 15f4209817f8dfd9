// gpumem: the command-line front door. Subcommands are defined one per file.
#include <cstdio>

#include "gpumem_build_info.h"  // generated: version, commit, parts built in
#include "tools/cli/command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "gpumem: a GPU memory allocator and leak profiler for PyTorch training.\n"
      "Replay real allocation traces through allocation policies, record and read gpumem\n"
      "traces, diagnose out-of-memory failures (leak, fragmentation or genuine peak) and\n"
      "compare live memory between steps or runs."};
  app.require_subcommand(1);
  app.set_version_flag("--version", GPUMEM_VERSION_TEXT);
  int status = gpumem::cli::kExitOk;
  gpumem::cli::AddReplayCommand(app, &status);
  gpumem::cli::AddDumpCommand(app, &status);
  gpumem::cli::AddReportCommand(app, &status);
  gpumem::cli::AddDiffCommand(app, &status);
  gpumem::cli::AddExportCommand(app, &status);
  gpumem::cli::AddRunCommand(app, &status);
  gpumem::cli::AddDoctorCommand(app, &status);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    // CLI11 returns 0 for --help/--version and its own codes for usage errors; usage
    // errors are bad input like any other.
    return code == 0 ? 0 : gpumem::cli::kExitBadInput;
  }
  return status;
}
