#include "tools/cli/tree_paths.h"

#include <cstdlib>

#ifndef GPUMEM_PYTHON_DIR
#define GPUMEM_PYTHON_DIR ""
#endif
#ifndef GPUMEM_LIB_DIR
#define GPUMEM_LIB_DIR ""
#endif

namespace gpumem::cli {

std::string FromEnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string PythonDir() { return FromEnvOr("GPUMEM_PYTHON_DIR", GPUMEM_PYTHON_DIR); }
std::string LibDir() { return FromEnvOr("GPUMEM_LIB_DIR", GPUMEM_LIB_DIR); }

}  // namespace gpumem::cli
