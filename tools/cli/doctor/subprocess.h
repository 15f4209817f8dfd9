// Runs a helper program (nvidia-smi, ldconfig, python3) and captures its stdout, with a
// time limit: a wedged driver can leave nvidia-smi hanging, and a doctor must not hang.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gpumem::cli::doctor {

struct Output {
  int exit_code = -1;  // -1 when it was killed or did not exit normally
  std::string stdout_text;
};

// Searches PATH for argv[0]. nullopt when it cannot be started (not found, not runnable).
// stderr goes to /dev/null unless `keep_stderr`.
std::optional<Output> RunCapture(const std::vector<std::string>& argv, int timeout_ms,
                                 bool keep_stderr = false);

// Whether `name` is an executable file in a PATH folder.
bool OnPath(const std::string& name);

}  // namespace gpumem::cli::doctor
