#include "tools/report/library_kind.h"

#include <iterator>

#include "absl/strings/match.h"

namespace gpumem::report {
namespace {

absl::string_view BaseName(absl::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

bool IsNativeFrame(absl::string_view filename, std::int32_t line) {
  return line == 0 && !filename.empty() && filename[0] != '[' && filename[0] != '<' &&
         !absl::EndsWith(filename, ".py");
}

bool IsPlumbing(absl::string_view name) {
  for (const char* lib : {"libcudart", "libcuda.", "libcupti", "libgpumem_cupti"}) {
    if (absl::StartsWith(name, lib)) return true;
  }
  return false;
}

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

OutsideLibrary LibraryOfFrame(absl::string_view filename, std::int32_t line) {
  return IsNativeFrame(filename, line) ? LibraryOfFile(filename) : OutsideLibrary::kUnknown;
}

}  // namespace gpumem::report
