#include "tools/cli/command.h"

namespace gpumem::cli {

// Placeholder until the 'replay' subcommand is written: it is not registered, so --help does
// not offer it.
void AddReplayCommand(CLI::App&, int*) {}

}  // namespace gpumem::cli
