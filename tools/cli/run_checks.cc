#include "tools/cli/run_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "profiler/recorder.h"
#include "profiler/trace_path.h"

namespace gpumem::cli {
namespace {

absl::Status Unwritable(const std::string& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("GPUMEM_TRACE='", value, "': ", why));
}

// The file a trace name gives this process (a rank's or pid's name differs only in the
// file name, not its folder) must be creatable: its folder exists and is writable.
absl::Status CheckTracePath(const std::string& pattern) {
  const std::string path = ExpandTracePath(pattern, TraceNameParts::OfThisProcess());
  struct stat st{};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Unwritable(pattern, "is a directory, not a file name");
    if (access(path.c_str(), W_OK) != 0) {
      return Unwritable(pattern, absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  if (stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Unwritable(pattern, absl::StrCat("folder ", folder, " does not exist"));
  }
  if (access(folder.c_str(), W_OK | X_OK) != 0) {
    return Unwritable(pattern, absl::StrCat("cannot create a file in ", folder, ": ",
                                            std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTraceSettings() {
  absl::StatusOr<RecorderOptions> options = RecorderOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  const char* trace = std::getenv("GPUMEM_TRACE");
  if (trace == nullptr || *trace == '\0') return absl::OkStatus();
  return CheckTracePath(trace);
}

}  // namespace gpumem::cli
