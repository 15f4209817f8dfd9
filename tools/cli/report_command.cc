#include "tools/cli/command.h"

namespace gpumem::cli {

// Placeholder until the 'report' subcommand is written: it is not registered, so --help does
// not offer it.
void AddReportCommand(CLI::App&, int*) {}

}  // namespace gpumem::cli
