#include "tools/cli/command.h"

namespace gpumem::cli {

// Placeholder until the 'export' subcommand is written: it is not registered, so --help does
// not offer it.
void AddExportCommand(CLI::App&, int*) {}

}  // namespace gpumem::cli
