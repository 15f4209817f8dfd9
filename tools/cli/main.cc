// gpumem: the command-line front door. Subcommands are defined one per file.
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "gpumem_build_info.h"  // generated: version, commit, parts built in
#include "tools/cli/command.h"
#include "tools/cli/write_file.h"

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
  // CLI11 would say only "A subcommand is required" for a misspelt one.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->check_name(argv[1]);
    }
    if (!known) {
      std::fprintf(stderr, "gpumem: unknown subcommand %s (one of: %s; gpumem --help)\n",
                   argv[1], names.c_str());
      return gpumem::cli::kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    // CLI11 returns 0 for --help/--version and its own codes for usage errors; usage
    // errors are bad input like any other.
    return code == 0 ? 0 : gpumem::cli::kExitBadInput;
  } catch (const std::bad_alloc&) {
    // An input too large for this machine's memory, though under GPUMEM_MAX_INPUT.
    std::fprintf(stderr,
                 "gpumem: out of memory while reading or analysing the input; a smaller "
                 "GPUMEM_MAX_INPUT refuses such inputs sooner\n");
    return gpumem::cli::kExitBadInput;
  }
  if (absl::Status flushed = gpumem::cli::FlushStdout(); !flushed.ok()) {
    std::fprintf(stderr, "gpumem: %s\n", std::string(flushed.message()).c_str());
    return status == gpumem::cli::kExitOk ? gpumem::cli::kExitBadInput : status;
  }
  return status;
}
