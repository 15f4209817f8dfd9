#include "tools/report/cupti_companion.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "profiler/trace_format.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {
constexpr char kExt[] = ".gpumem";
constexpr char kCuptiExt[] = ".cupti.gpumem";

// A ring's name for one of its segments, else the path itself.
std::string TraceName(const std::string& path) {
  const std::string ring = format::RingNameOfSegment(path);
  return ring.empty() ? path : ring;
}

bool IsCuptiTrace(const std::string& path) { return absl::EndsWith(TraceName(path), kCuptiExt); }

// A compressed trace's suffix (a pair kept compressed: NAME.gpumem.xz beside
// NAME.cupti.gpumem.xz), else "".
std::string CompressionSuffix(const std::string& path) {
  for (const char* suffix : {".xz", ".gz", ".zst"}) {
    if (absl::EndsWith(path, suffix)) return suffix;
  }
  return "";
}
}  // namespace

std::string CuptiCompanionPath(const std::string& path) {
  const std::string compressed = CompressionSuffix(path);
  const std::string plain = path.substr(0, path.size() - compressed.size());
  if (!absl::EndsWith(plain, kExt) || IsCuptiTrace(plain)) return "";
  const std::string main = TraceName(plain);
  return main.substr(0, main.size() - (sizeof(kExt) - 1)) + kCuptiExt + compressed;
}

namespace {
// `p` is `main`'s companion or one of its segments, or a companion written beside it when
// its name was taken (NAME.cupti.<pid>.gpumem: a shell's run-*.gpumem picks those up too).
bool IsCompanionOf(const std::string& p, const std::string& main) {
  const std::string companion = CuptiCompanionPath(main);
  if (companion.empty()) return false;
  if (p == companion) return true;
  const std::string stem = companion.substr(0, companion.size() - (sizeof(kExt) - 1)) + ".";
  return absl::StartsWith(p, stem) && absl::EndsWith(p, kExt);
}

// `p` is a segment of the ring named `name`: the ring is read through its name.
bool IsSegmentOf(const std::string& p, const std::string& name) {
  return format::RingNameOfSegment(p) == name;
}
}  // namespace

std::vector<std::string> MainTraces(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  std::vector<std::string> rings_taken;  // rings already read through one of their segments
  for (const std::string& p : paths) {
    const bool read_with_another =
        std::any_of(paths.begin(), paths.end(), [&](const std::string& other) {
          return IsCompanionOf(p, other) || IsSegmentOf(p, other);
        });
    if (read_with_another) continue;
    // A segment reads its whole ring: several of one ring (run.seg*.gpumem) are one trace.
    const std::string ring = format::RingNameOfSegment(p);
    if (!ring.empty()) {
      if (std::find(rings_taken.begin(), rings_taken.end(), ring) != rings_taken.end()) continue;
      rings_taken.push_back(ring);
    }
    out.push_back(p);
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
