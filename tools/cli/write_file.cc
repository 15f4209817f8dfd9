#include "tools/cli/write_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpumem::cli {

absl::Status WriteFile(const std::string& path, absl::string_view data) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  const bool written = std::fwrite(data.data(), 1, data.size(), file) == data.size();
  int error = written ? 0 : errno;
  // fclose flushes the last buffer: a full disk shows up here as often as in fwrite.
  if (std::fclose(file) != 0 && error == 0) error = errno;
  if (!written || error != 0) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot write: ", std::strerror(error != 0 ? error : EIO)));
  }
  return absl::OkStatus();
}

absl::Status FlushStdout() {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (flushed && !std::ferror(stdout)) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("cannot write to stdout: ", std::strerror(error != 0 ? error : EIO)));
}

}  // namespace gpumem::cli
