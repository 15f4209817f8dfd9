#include "tools/report/cupti_companion.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {
constexpr char kExt[] = ".gpumem";
constexpr char kCuptiExt[] = ".cupti.gpumem";
}  // namespace

std::string CuptiCompanionPath(const std::string& path) {
  if (!absl::EndsWith(path, kExt) || absl::EndsWith(path, kCuptiExt)) return "";
  return path.substr(0, path.size() - (sizeof(kExt) - 1)) + kCuptiExt;
}

namespace {
// `p` is `main`'s companion, or a companion written beside it when its name was taken
// (NAME.cupti.<pid>.gpumem: a shell's run-*.gpumem picks those up too).
bool IsCompanionOf(const std::string& p, const std::string& main) {
  const std::string companion = CuptiCompanionPath(main);
  if (companion.empty()) return false;
  if (p == companion) return true;
  const std::string stem = companion.substr(0, companion.size() - (sizeof(kExt) - 1)) + ".";
  return absl::StartsWith(p, stem) && absl::EndsWith(p, kExt);
}
}  // namespace

std::vector<std::string> WithoutCompanions(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    const bool companion = std::any_of(paths.begin(), paths.end(), [&](const std::string& main) {
      return IsCompanionOf(p, main);
    });
    if (!companion) out.push_back(p);
  }
  return out;
}

std::optional<trace::Trace> LoadCuptiCompanion(const std::string& path) {
  const std::string companion = CuptiCompanionPath(path);
  std::error_code error;
  if (companion.empty() || !std::filesystem::exists(companion, error)) return std::nullopt;
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(companion);
  if (!t.ok()) {
    std::fprintf(stderr,
                 "warning: %s: not read (%s): memory outside the allocator is not "
                 "split by library\n",
                 companion.c_str(), std::string(t.status().message()).c_str());
    return std::nullopt;
  }
  return *std::move(t);
}

}  // namespace gpumem::report
