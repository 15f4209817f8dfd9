#include "tools/cli/command.h"

namespace gpumem::cli {

// Placeholder until the 'dump' subcommand is written: it is not registered, so --help does
// not offer it.
void AddDumpCommand(CLI::App&, int*) {}

}  // namespace gpumem::cli
