// Writing a command's output file, with the reason when it fails (a full disk, a folder
// that does not exist, no permission), and stdout's final check.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpumem::cli {

// The whole of `data` into `path`; an error reads "PATH: cannot write: <strerror>".
absl::Status WriteFile(const std::string& path, absl::string_view data);

// Flushes stdout: an error when any of what the command printed was not written (a full
// disk, a closed pipe), "cannot write to stdout: <strerror>".
absl::Status FlushStdout();

}  // namespace gpumem::cli
