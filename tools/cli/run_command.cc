#include "tools/cli/command.h"

namespace gpumem::cli {

// Placeholder until the 'run' subcommand is written: it is not registered, so --help does
// not offer it.
void AddRunCommand(CLI::App&, int*) {}

}  // namespace gpumem::cli
