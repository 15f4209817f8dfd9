// Library-level checks: CUDA runtime / CUPTI copies on the search path, whether gpumem's
// own libraries load, and the pinned-memory limit.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <climits>
#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "tools/cli/doctor/checks.h"
#include "tools/cli/doctor/subprocess.h"

namespace gpumem::cli::doctor {
namespace {

constexpr rlim_t kMemlockEnough = rlim_t{1} << 30;  // below this, pinning large buffers fails

struct Found {
  std::string path;    // where it was seen
  std::string source;  // "LD_LIBRARY_PATH", "torch installation", "loader cache", ...
};

// "libcudart.so.12.4.127" for prefix "libcudart.so." -> true; "libcudart.so" -> false.
bool IsVersioned(absl::string_view name, absl::string_view prefix) {
  return absl::StartsWith(name, prefix) && name.size() > prefix.size() &&
         std::isdigit(static_cast<unsigned char>(name[prefix.size()]));
}

void ScanDir(const std::string& dir, const std::string& source, absl::string_view prefix,
             std::vector<Found>* out) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (IsVersioned(e->d_name, prefix)) out->push_back({dir + "/" + e->d_name, source});
  }
  closedir(d);
}

void ScanPathList(const char* list, const std::string& source, absl::string_view prefix,
                  std::vector<Found>* out) {
  if (list == nullptr) return;
  for (absl::string_view dir : absl::StrSplit(list, ':', absl::SkipEmpty())) {
    ScanDir(std::string(dir), source, prefix, out);
  }
}

// The system's folders: the loader cache (ldconfig -p), or GPUMEM_DOCTOR_LIBRARY_PATH's
// folders in its place (tests, or asking "what if these were the system's").
void ScanSystem(absl::string_view prefix, std::vector<Found>* out) {
  if (const char* dirs = std::getenv("GPUMEM_DOCTOR_LIBRARY_PATH")) {
    ScanPathList(dirs, "library path", prefix, out);
    return;
  }
  std::optional<Output> cache = RunCapture({"ldconfig", "-p"}, 10000);
  if (!cache.has_value()) cache = RunCapture({"/sbin/ldconfig", "-p"}, 10000);
  if (!cache.has_value()) return;
  for (absl::string_view line : absl::StrSplit(cache->stdout_text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    size_t arrow = line.find(" => ");
    if (arrow == absl::string_view::npos || !IsVersioned(line, prefix)) continue;
    out->push_back({std::string(line.substr(arrow + 4)), "loader cache"});
  }
}

// The version a file really is: its resolved name's suffix ("12.4.127"), so a soname link
// and the file it names count once.
std::string VersionOf(const std::string& path, absl::string_view prefix) {
  char resolved[PATH_MAX];
  std::string real = realpath(path.c_str(), resolved) ? resolved : path;
  std::string base = real.substr(real.rfind('/') + 1);
  return IsVersioned(base, prefix) ? base.substr(prefix.size()) : base;
}

Check VersionCheck(const std::string& id, const std::string& what, absl::string_view prefix,
                   const TorchFacts& torch) {
  std::vector<Found> found;
  ScanPathList(std::getenv("LD_LIBRARY_PATH"), "LD_LIBRARY_PATH", prefix, &found);
  for (const std::string& dir : torch.library_dirs) ScanDir(dir, "torch installation", prefix, &found);
  ScanSystem(prefix, &found);
  std::map<std::string, std::vector<std::string>> by_version;  // version -> where
  std::set<std::string> seen;
  for (const Found& f : found) {
    char resolved[PATH_MAX];
    std::string key = realpath(f.path.c_str(), resolved) ? resolved : f.path;
    if (!seen.insert(key).second) continue;
    by_version[VersionOf(f.path, prefix)].push_back(absl::StrCat(f.path, " (", f.source, ")"));
  }
  Check check = MakeCheck(id, Status::kOk, absl::StrCat("no ", prefix, "* on the library path"));
  std::vector<std::string> parts;
  for (const auto& [version, where] : by_version) {
    parts.push_back(absl::StrCat(version, " at ", absl::StrJoin(where, ", ")));
    check.details[version] = where;
  }
  if (by_version.size() == 1) check.finding = absl::StrCat("one ", what, ": ", parts[0]);
  if (by_version.size() > 1) {
    check.status = Status::kWarn;
    check.finding = absl::StrCat(by_version.size(), " ", what, " versions visible at once: ",
                                 absl::StrJoin(parts, "; "));
    check.fix = absl::StrCat("keep one: take the others' folders out of LD_LIBRARY_PATH "
                             "(torch brings its own ", prefix, "*); a mix loads the wrong "
                             "one and fails with undefined symbols or version errors");
  }
  return check;
}

// dlopen's verdict on `path`: empty when it loads, else why not.
std::string LoadError(const std::string& path, int flags) {
  void* lib = dlopen(path.c_str(), flags | RTLD_LOCAL);
  if (lib != nullptr) return "";  // kept loaded: unloading buys nothing in a short process
  const char* why = dlerror();
  return why ? why : "dlopen failed";
}

}  // namespace

std::vector<Check> LibraryVersionChecks(const TorchFacts& torch) {
  return {VersionCheck("cuda_runtimes", "CUDA runtime", "libcudart.so.", torch),
          VersionCheck("cupti_versions", "CUPTI", "libcupti.so.", torch)};
}

Check PinnedMemoryCheck() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
    return MakeCheck("pinned_memory", Status::kSkipped, "getrlimit(RLIMIT_MEMLOCK) failed");
  }
  if (limit.rlim_cur == RLIM_INFINITY) {
    return MakeCheck("pinned_memory", Status::kOk, "ulimit -l is unlimited");
  }
  std::string value = absl::StrCat("ulimit -l is ", limit.rlim_cur / 1024, " KiB");
  Check check = MakeCheck("pinned_memory", Status::kOk, value);
  check.details = {{"memlock_bytes", limit.rlim_cur}};
  if (limit.rlim_cur < kMemlockEnough) {
    check.status = Status::kWarn;
    check.finding = value + ": too low; locking pinned host memory (pin_memory=True, NCCL "
                            "over InfiniBand) can fail";
    check.fix = "raise it: ulimit -l unlimited (in Docker: --ulimit memlock=-1; for a "
                "login: '* - memlock unlimited' in /etc/security/limits.conf)";
  }
  return check;
}

Check GpumemLibraryCheck(const std::string& lib_dir) {
  std::string path = lib_dir + "/libgpumem.so";
  const char kBuild[] = "build it (cmake --build build --target gpumem_shared) or set "
                        "GPUMEM_LIB_DIR to the folder that holds libgpumem.so";
  if (access(path.c_str(), R_OK) != 0) {
    return MakeCheck("libgpumem", Status::kFail, path + " not found", kBuild);
  }
  std::string error = LoadError(path, RTLD_NOW);
  if (!error.empty()) return MakeCheck("libgpumem", Status::kFail, "does not load: " + error, kBuild);
  return MakeCheck("libgpumem", Status::kOk, path + " loads");
}

Check CuptiCheck(const std::string& lib_dir) {
  std::string path = lib_dir + "/libgpumem_cupti.so";
  if (access(path.c_str(), R_OK) != 0) {
    return MakeCheck("cupti", Status::kSkipped,
                     path + " not built (no CUPTI at build time): traced runs record "
                            "PyTorch's allocations, not other libraries' cudaMalloc");
  }
  std::string error = LoadError(path, RTLD_LAZY);
  if (!error.empty()) {
    return MakeCheck("cupti", Status::kWarn, "the CUPTI tracer does not load: " + error,
                     "put CUPTI's folder on LD_LIBRARY_PATH (the toolkit's extras/CUPTI/lib64 "
                     "or pip's nvidia/cuda_cupti/lib), or run traces with --no-cupti");
  }
  return MakeCheck("cupti", Status::kOk, path + " and its libcupti load");
}

}  // namespace gpumem::cli::doctor
