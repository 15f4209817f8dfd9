#include "tools/report/sites.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpumem::report {

bool IsLibraryFrame(const trace::Frame& frame) {
  absl::string_view file = frame.filename;
  if (file.empty()) return true;
  // Installed packages (torch, transformers, ...), the stdlib, and interpreter internals.
  static constexpr absl::string_view kLibraryMarks[] = {
      "site-packages/", "dist-packages/", "/lib/python", "<frozen", "/torch/",
      "/c10/",          "/aten/",         "/usr/include/", "/usr/lib/"};
  for (absl::string_view mark : kLibraryMarks) {
    if (absl::StrContains(file, mark)) return true;
  }
  if (absl::StartsWith(file, "torch/") || absl::StartsWith(file, "<")) return true;
  // Native frames (gpumem traces carry them too): the allocator, libtorch, CUDA libraries.
  static constexpr absl::string_view kNativeSuffixes[] = {".so", ".cpp", ".cc", ".h",
                                                          ".hpp", ".cu", ".cuh", ".c"};
  for (absl::string_view suffix : kNativeSuffixes) {
    if (absl::EndsWith(file, suffix) || absl::StrContains(file, absl::StrCat(suffix, "."))) {
      return true;
    }
  }
  return false;
}

std::string FrameName(const trace::Frame& frame) {
  return absl::StrCat(frame.filename, ":", frame.line, " ", frame.function);
}

SiteTable::SiteTable(const trace::Trace& trace) {
  sites_.push_back(Site{"<no Python frames>", 0, 0});
  absl::flat_hash_map<std::uint32_t, std::uint32_t> site_of_frame;
  site_of_stack_.resize(trace.stacks.size(), 0);
  for (std::uint32_t s = 0; s < trace.stacks.size(); ++s) {
    const std::vector<std::uint32_t>& stack = trace.stacks[s];
    if (stack.empty()) continue;
    // Innermost user frame; if the whole stack is library code, its innermost frame.
    std::uint32_t chosen = stack.front();
    for (std::uint32_t f : stack) {
      if (!IsLibraryFrame(trace.frames[f])) {
        chosen = f;
        break;
      }
    }
    auto [it, inserted] = site_of_frame.try_emplace(chosen, sites_.size());
    if (inserted) sites_.push_back(Site{FrameName(trace.frames[chosen]), chosen, s});
    site_of_stack_[s] = it->second;
  }
}

}  // namespace gpumem::report
