// The torch-level checks, which need the Python that runs the job: python/gpumem/doctor.py
// run by that interpreter, its JSON read back.
#pragma once

#include <string>
#include <vector>

#include "tools/cli/doctor/check.h"

namespace gpumem::cli::doctor {

struct PythonResult {
  std::vector<Check> checks;
  TorchFacts torch;
};

// `python` is the interpreter (searched on PATH), `script` doctor.py's path and `lib_dir`
// where libgpumem_torch.so would be. Without a usable interpreter the torch checks come
// back skipped, saying why.
PythonResult RunPythonChecks(const std::string& python, const std::string& script,
                             const std::string& lib_dir);

}  // namespace gpumem::cli::doctor
