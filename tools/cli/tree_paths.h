// Where this build's Python package and libraries are, for commands that start Python or
// load gpumem's libraries (run, doctor). Each can be moved by an environment variable.
#pragma once

#include <string>

namespace gpumem::cli {

// `name`'s value, or `fallback` where it is unset or empty.
std::string FromEnvOr(const char* name, const std::string& fallback);

// GPUMEM_PYTHON_DIR, else this tree's python/ folder (holding the gpumem package).
std::string PythonDir();
// GPUMEM_LIB_DIR, else this build's lib/ folder (libgpumem.so and friends).
std::string LibDir();

}  // namespace gpumem::cli
