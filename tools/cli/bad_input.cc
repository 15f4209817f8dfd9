#include <cstdio>
#include <string>

#include "tools/cli/command.h"

namespace gpumem::cli {

int BadInput(const char* command, const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "gpumem %s: %s\n", command, line.c_str());
  return kExitBadInput;
}

}  // namespace gpumem::cli
