#include "tools/report/outside_library.h"

#include <cstddef>
#include <iterator>

#include "absl/strings/match.h"

namespace gpumem::report {
namespace {

absl::string_view BaseName(absl::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// Native frames carry a shared object's path and line 0 (docs/trace-format.md).
bool IsNativeFrame(const trace::Frame& f) {
  return f.line == 0 && !f.filename.empty() && f.filename[0] != '[' && f.filename[0] != '<' &&
         !absl::EndsWith(f.filename, ".py");
}

bool IsPlumbing(absl::string_view name) {
  for (const char* lib : {"libcudart", "libcuda.", "libcupti", "libgpumem_cupti"}) {
    if (absl::StartsWith(name, lib)) return true;
  }
  return false;
}

}  // namespace

namespace {

struct LibraryNames {
  const char* name;  // for people
  const char* key;   // for JSON
};
// In OutsideLibrary's order.
constexpr LibraryNames kLibraryNames[] = {
    {"NCCL", "nccl"},   {"cuBLAS", "cublas"},   {"cuDNN", "cudnn"},
    {"other", "other"}, {"unknown", "unknown"}, {"allocator", "allocator"}};

const LibraryNames& NamesOf(OutsideLibrary library) {
  const auto i = static_cast<std::size_t>(library);
  const auto unknown = static_cast<std::size_t>(OutsideLibrary::kUnknown);
  return kLibraryNames[i < std::size(kLibraryNames) ? i : unknown];
}

}  // namespace

const char* OutsideLibraryName(OutsideLibrary library) { return NamesOf(library).name; }

const char* OutsideLibraryKey(OutsideLibrary library) { return NamesOf(library).key; }

OutsideLibrary LibraryOfFile(absl::string_view path) {
  const absl::string_view name = BaseName(path);
  if (IsPlumbing(name)) return OutsideLibrary::kUnknown;
  if (absl::StartsWith(name, "libnccl")) return OutsideLibrary::kNccl;
  if (absl::StartsWith(name, "libcublas")) return OutsideLibrary::kCublas;
  if (absl::StartsWith(name, "libcudnn")) return OutsideLibrary::kCudnn;
  if (absl::StartsWith(name, "libgpumem") || absl::StartsWith(name, "libc10_cuda")) {
    return OutsideLibrary::kAllocator;
  }
  return OutsideLibrary::kOther;
}

bool IsDriverCall(const trace::Trace& trace, std::uint32_t stack) {
  if (stack >= trace.stacks.size() || trace.stacks[stack].empty()) return false;
  const std::uint32_t f = trace.stacks[stack].front();
  return f < trace.frames.size() && absl::StartsWith(trace.frames[f].filename, "[cuda-");
}

OutsideLibrary LibraryOfStack(const trace::Trace& trace, std::uint32_t stack) {
  if (stack >= trace.stacks.size()) return OutsideLibrary::kUnknown;
  for (std::uint32_t id : trace.stacks[stack]) {
    if (id >= trace.frames.size() || !IsNativeFrame(trace.frames[id])) continue;
    const OutsideLibrary library = LibraryOfFile(trace.frames[id].filename);
    if (library != OutsideLibrary::kUnknown) return library;
  }
  return OutsideLibrary::kUnknown;
}

}  // namespace gpumem::report
